"""Serve an ASGI application from a Sanic route: scope in, body in, streamed response out."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from sanic import Request
from sanic.compat import Header
from sanic.response import HTTPResponse, json

log = logging.getLogger("switchboard.mcp.bridge")

Message = MutableMapping[str, Any]
ASGIApp = Callable[
    [
        MutableMapping[str, Any],
        Callable[[], Awaitable[Message]],
        Callable[[Message], Awaitable[None]],
    ],
    Awaitable[None],
]

#: How long the ASGI app may take to wind down after the client went away.
DISCONNECT_GRACE_SECONDS = 5.0


class ClientDisconnected(OSError):
    """The client closed the connection while the ASGI app was still sending."""


def _wire(text: str) -> bytes:
    """The bytes ``text`` came from, or goes out as: Sanic decodes a request's head as UTF-8
    with surrogateescape and encodes response headers back the same way, so any byte a client
    sends (a UTF-8 ``User-Agent``, a token that is not UTF-8) round-trips exactly, where
    Latin-1 would fail on the one and mangle the other."""
    return text.encode("utf-8", "surrogateescape")


def _unwire(raw: bytes) -> str:
    """``_wire`` undone: an ASGI app's header bytes as the text Sanic writes back unchanged."""
    return raw.decode("utf-8", "surrogateescape")


def build_scope(request: Request, path: str | None = None) -> dict[str, Any]:
    """An ASGI HTTP scope for a Sanic request (headers lower-cased, as ASGI requires)."""
    path = path or request.path
    server_port = getattr(request, "server_port", None) or 80
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": request.version or "1.1",
        "method": request.method,
        "scheme": request.scheme,
        "path": path,
        "raw_path": _wire(path),
        "root_path": "",
        "query_string": _wire(request.query_string or ""),
        "headers": [(_wire(name.lower()), _wire(value)) for name, value in request.headers.items()],
        "client": (request.ip, request.port) if request.ip else None,
        "server": (request.server_name, server_port),
        "state": {},
        "extensions": {},
    }


class _Exchange:
    """One request/response between Sanic's stream and the ASGI app's receive/send."""

    def __init__(self, request: Request) -> None:
        self.request = request
        self.disconnected = asyncio.Event()
        self.body_given = False
        self.start: Message | None = None
        self.response: Any = None
        self.finished = False

    async def receive(self) -> Message:
        if not self.body_given:
            self.body_given = True
            return {"type": "http.request", "body": self.request.body or b"", "more_body": False}
        # The body was complete; the next event an ASGI app can see is the disconnect.
        await self.disconnected.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        if self.disconnected.is_set():
            raise ClientDisconnected("client disconnected")
        kind = message["type"]
        if kind == "http.response.start":
            self.start = message
            if self._is_stream(message):
                # An event stream may stay quiet for long: the client needs its headers now.
                await self._respond()
                await self._write(b"", end=False)
        elif kind == "http.response.body":
            if self.start is None:
                raise RuntimeError("ASGI app sent a body before http.response.start")
            if self.response is None:
                await self._respond()
            more = bool(message.get("more_body", False))
            await self._write(message.get("body") or b"", end=not more)

    @staticmethod
    def _is_stream(start: Message) -> bool:
        return any(
            k.lower() == b"content-type" and v.startswith(b"text/event-stream")
            for k, v in start.get("headers", [])
        )

    async def _respond(self) -> None:
        assert self.start is not None
        headers = Header([(_unwire(k), _unwire(v)) for k, v in self.start.get("headers", [])])
        # Sanic writes a content type on every response with a body (the string "None" when
        # given none). A response sent without one (the SDK's plain-text 400s) means
        # "assume application/octet-stream" (RFC 9110 8.3), so that is what goes out.
        content_type = headers.pop("content-type", None) or "application/octet-stream"
        self.response = await self.request.respond(
            status=int(self.start["status"]), headers=headers, content_type=content_type
        )

    async def _write(self, body: bytes, *, end: bool) -> None:
        try:
            await self.response.send(body, end_stream=end)
        except (ConnectionError, asyncio.CancelledError):
            self.disconnected.set()
            raise
        except Exception as exc:  # Sanic raises its own errors on a closed transport
            self.disconnected.set()
            raise ClientDisconnected(str(exc)) from exc
        if end:
            self.finished = True


async def serve_asgi(
    app: ASGIApp, request: Request, *, path: str | None = None
) -> HTTPResponse | None:
    """Run ``app`` for ``request``, streaming its response through ``request.respond()``.

    The app runs in its own task so that when Sanic cancels the handler (the client
    went away) the app still hears ``http.disconnect`` and can clean up.
    """
    exchange = _Exchange(request)
    task = asyncio.ensure_future(app(build_scope(request, path), exchange.receive, exchange.send))
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        exchange.disconnected.set()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(task, DISCONNECT_GRACE_SECONDS)
        raise
    except ClientDisconnected:
        log.debug("client went away during %s %s", request.method, request.path)
        return None
    except Exception:
        if exchange.response is None:
            raise  # nothing sent yet: the app's error handlers answer 500
        log.exception("ASGI app failed mid-response on %s %s", request.method, request.path)
    finally:
        exchange.disconnected.set()
    if exchange.response is None:
        log.error("ASGI app sent no response for %s %s", request.method, request.path)
        return json({"error": "internal error"}, status=500)
    if not exchange.finished:
        with contextlib.suppress(Exception):
            await exchange.response.eof()
    return None
