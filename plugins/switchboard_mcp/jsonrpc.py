"""JSON-RPC envelopes the SDK would drop in silence, answered with Invalid Request instead."""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
from mcp.shared.message import SessionMessage
from mcp_types import INVALID_REQUEST, PARSE_ERROR, ErrorData, JSONRPCError

#: The HTTP status of a refused envelope, as the SDK answers unparseable JSON.
HTTP_STATUS = 400


def problem(message: Any) -> str | None:
    """Why a decoded body or stdio line is not one JSON-RPC message the SDK can answer.

    The SDK reads a request whose ``id`` is not a string or an integer (an object, an
    array, a boolean, a float, null) as a notification, since the notification model
    ignores unknown keys, and so never answers it. JSON-RPC 2.0 owes such a request an
    Invalid Request error; MCP narrows ids to strings and integers and forbids null.
    """
    if isinstance(message, list):
        return "batches are not supported; send one message per request"
    if not isinstance(message, dict):
        return "a message must be a JSON object"
    if "method" in message and "id" in message and not _valid_id(message["id"]):
        return "id must be a string or an integer"
    return None


def _valid_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def error(code: int, message: str) -> JSONRPCError:
    """An error for a message whose id could not be read: ``id`` is null."""
    return JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(code=code, message=message))


def invalid_request(reason: str) -> JSONRPCError:
    return error(INVALID_REQUEST, f"Invalid Request: {reason}")


def http_body(body: bytes) -> dict[str, Any] | None:
    """The error body for an invalid POST body, or None to let the SDK read it.

    Unparseable JSON is left to the SDK, which answers it with a parse error.
    """
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return None
    reason = problem(message)
    if reason is None:
        return None
    return invalid_request(reason).model_dump(mode="json", by_alias=True, exclude_unset=True)


class ScreenedLines:
    """Stdin lines for the SDK's stdio reader, less those it would drop without an answer.

    Those are answered here with a JSON-RPC error, through the transport's write stream
    once :meth:`attach` has handed it over. Async iteration is all the reader asks of it.
    """

    def __init__(self, lines: AsyncIterable[bytes]) -> None:
        self._lines = lines
        self._send: Callable[[SessionMessage], Awaitable[None]] | None = None
        self._attached = anyio.Event()

    def attach(self, send: Callable[[SessionMessage], Awaitable[None]]) -> None:
        self._send = send
        self._attached.set()

    async def __aiter__(self) -> AsyncIterator[str]:
        async for raw in self._lines:
            line = raw.decode("utf-8", errors="replace")
            answer = self._answer(line)
            if answer is None:
                yield line
            else:
                await self._reply(answer)

    @staticmethod
    def _answer(line: str) -> JSONRPCError | None:
        if not line.strip():
            return None
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):
            return error(PARSE_ERROR, "Parse error")
        reason = problem(message)
        return invalid_request(reason) if reason is not None else None

    async def _reply(self, answer: JSONRPCError) -> None:
        await self._attached.wait()
        assert self._send is not None
        try:
            await self._send(SessionMessage(answer))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # the server is shutting down: nobody is left to answer
