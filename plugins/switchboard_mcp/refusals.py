"""A Switchboard error raised before the SDK answers (the bearer lookup) as a JSON-RPC error.

The SDK's bearer middleware looks the token up before any session exists; what it raises
there (``StoreUnavailable`` with the database away) would reach Starlette's last-resort
handler, a 500. Answered here instead with the status and code of the one mapping in
``switchboard.errors``: ``503``, ``Retry-After`` and the JSON-RPC error ``unavailable``.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from mcp_types import ErrorData, JSONRPCError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from switchboard.errors import (
    RETRY_AFTER_SECONDS,
    StoreUnavailable,
    SwitchboardError,
    http_status,
    mcp_code,
)

log = logging.getLogger("switchboard.mcp")

#: The JSON-RPC error code of a refusal (the implementation-defined server-error range);
#: ``data.code`` carries Switchboard's own code, as a tool error's text does.
SERVER_ERROR = -32000


def error_body(exc: SwitchboardError, request_id: str | int | None) -> bytes:
    code = mcp_code(exc)
    error = JSONRPCError(
        jsonrpc="2.0",
        id=request_id,
        error=ErrorData(code=SERVER_ERROR, message=f"{code}: {exc}", data={"code": code}),
    )
    return json.dumps(error.model_dump(mode="json", by_alias=True, exclude_unset=True)).encode()


def _request_id(body: bytes) -> str | int | None:
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return None
    rid = message.get("id") if isinstance(message, dict) else None
    valid = isinstance(rid, str) or (isinstance(rid, int) and not isinstance(rid, bool))
    return rid if valid else None


class RefusalMiddleware:
    """Outermost of the SDK app's own middleware: answers a SwitchboardError that escapes
    before the response started; after that, lets it through."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False
        seen: list[Message] = []  # the body messages the app has read

        async def read() -> Message:  # kept to name the request's id in a refusal
            message = await receive()
            if message["type"] == "http.request":
                seen.append(message)
            return message

        async def write(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, read, write)
        except SwitchboardError as exc:
            if started:
                raise
            await self._refuse(exc, scope, seen, receive, send)

    async def _refuse(
        self, exc: SwitchboardError, scope: Scope, seen: list[Message], receive: Receive, send: Send
    ) -> None:
        if isinstance(exc, StoreUnavailable):
            # Expected in an outage: one line, the driver's text for the log only.
            log.warning("%s %s: %s: %s", scope["method"], scope["path"], exc, exc.detail)
        body = b"".join(m.get("body", b"") for m in seen)
        if not seen and scope["method"] == "POST":
            message = await receive()
            body = message.get("body", b"") if message["type"] == "http.request" else b""
        status = http_status(exc)
        headers: list[tuple[bytes, bytes]] = [(b"content-type", b"application/json")]
        if status == 503:
            headers.append((b"retry-after", str(RETRY_AFTER_SECONDS).encode()))
        payload = error_body(exc, _request_id(body))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": payload})


def install(app: Any) -> None:
    """Add the middleware to the SDK's Starlette app (before it first runs)."""
    app.add_middleware(RefusalMiddleware)
