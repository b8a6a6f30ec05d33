"""Streamable HTTP at ``/mcp``: the SDK app's lifecycle and the Sanic route that bridges to it."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

from mcp.server.transport_security import TransportSecuritySettings
from sanic import Request
from sanic.response import HTTPResponse, json, text

from switchboard.runtime import Runtime

from . import hosts, jsonrpc, refusals
from .auth import EndpointTokenVerifier, http_caller
from .bridge import ASGIApp, serve_asgi
from .route import PATH, STATE_KEY
from .server import SwitchboardMCP, build_server


@dataclass
class MCPHTTP:
    """What ``startup`` keeps in ``runtime.state["mcp"]`` for the route and ``shutdown``."""

    server: SwitchboardMCP
    asgi: ASGIApp
    security: TransportSecuritySettings
    task: asyncio.Task[None] | None = None
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def answer(self, request: Request) -> HTTPResponse | None:
        """A request to ``/mcp`` (``route``), screened, then answered by the SDK app."""
        refused = screen(self, request)
        if refused is not None:
            return refused
        return await serve_asgi(self.asgi, request, path=PATH)


def build_http(rt: Runtime) -> MCPHTTP:
    server = build_server(rt, http_caller, token_verifier=EndpointTokenVerifier(rt))
    security = hosts.transport_security(rt.config)
    asgi = server.streamable_http_app(
        streamable_http_path=PATH,
        # Sessions live in one process's memory; Sanic may run several workers.
        stateless_http=True,
        transport_security=security,
        max_request_body_size=int(rt.config.section("ingest")["max_body_bytes"]),
    )
    refusals.install(asgi)
    return MCPHTTP(server, asgi, security)


async def start(rt: Runtime) -> None:
    """Build the server from the registry and enter the session manager's run context."""
    state = build_http(rt)
    ready = asyncio.Event()

    async def run() -> None:
        # anyio task groups must be entered and left by the same task: this one.
        async with state.server.session_manager.run():
            ready.set()
            await state.stop.wait()

    state.task = asyncio.get_running_loop().create_task(run(), name="switchboard-mcp")
    waiter = asyncio.ensure_future(ready.wait())
    await asyncio.wait({waiter, state.task}, return_when=asyncio.FIRST_COMPLETED)
    if not ready.is_set():
        waiter.cancel()
        state.task.result()  # raises what stopped it
        raise RuntimeError("the MCP session manager stopped during start-up")
    rt.state[STATE_KEY] = state


async def stop(rt: Runtime) -> None:
    state: MCPHTTP | None = rt.state.pop(STATE_KEY, None)
    if state is None or state.task is None:
        return
    state.stop.set()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(state.task, 10)
    await _stop_sse_watcher()


async def _stop_sse_watcher() -> None:
    """Cancel sse-starlette's per-loop shutdown poller (it only knows how to watch uvicorn)."""
    watchers = [
        t
        for t in asyncio.all_tasks()
        if getattr(t.get_coro(), "__qualname__", "") == "_shutdown_watcher"
    ]
    for task in watchers:
        task.cancel()
    await asyncio.gather(*watchers, return_exceptions=True)


def screen(state: MCPHTTP, request: Request) -> HTTPResponse | None:
    """Refuse what the SDK would let through: near-miss Host/Origin values, unanswerable bodies.

    Runs before the SDK app, so ahead of its bearer check too: neither refusal reads a token.
    """
    refused = hosts.refusal(
        state.security, request.headers.getall("host", []), request.headers.getall("origin", [])
    )
    if refused is not None:
        status, message = refused
        return text(message, status=status)
    if request.method == "POST":
        error = jsonrpc.http_body(request.body or b"")
        if error is not None:
            return json(error, status=jsonrpc.HTTP_STATUS)
    return None
