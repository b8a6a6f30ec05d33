"""The ``/mcp`` route, registered without the MCP SDK: in every process that builds the app.

``serve``'s main process builds it too, and serves nothing: the SDK (0.8 s of imports, ~25 MB
there) is imported by a worker's start-up (``streamable.start``), before any request.
"""

from __future__ import annotations

from typing import Any

from sanic import Request, Sanic
from sanic.response import HTTPResponse, json

from switchboard.runtime import Runtime

PATH = "/mcp"
STATE_KEY = "mcp"


def add_route(app: Sanic[Any, Any]) -> None:
    rt: Runtime = app.ctx.runtime

    async def mcp_endpoint(request: Request) -> HTTPResponse | None:
        # ``streamable.MCPHTTP``, made by the worker's start-up (with the SDK)
        state = rt.state.get(STATE_KEY)
        if state is None:
            return json({"error": "the MCP surface is not running"}, status=503)
        answer: HTTPResponse | None = await state.answer(request)
        return answer

    # No GET: stateless, the server has nothing to send on a stream of its own, and the SDK
    # would keep one open (a ping every 15 s) for as long as the client liked, holding a
    # connection slot with no deadline. MCP's answer for that is 405; stock clients open
    # one only for a session, which a stateless server never gives.
    app.add_route(mcp_endpoint, PATH, methods=["POST", "DELETE"], name="mcp")
