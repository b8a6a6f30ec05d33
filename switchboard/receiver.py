"""The webhook receiver: ``POST /webhooks/w/<token>``."""

from __future__ import annotations

from typing import Any

from sanic import Request, Sanic
from sanic.response import HTTPResponse

from .errors import RETRY_AFTER_SECONDS
from .jsontext import dumps_bytes
from .runtime import Runtime
from .service.ingest import ingest
from .sources import Headers


def add_receiver_routes(app: Sanic[Any, Any], rt: Runtime) -> None:
    """Register the ingest route on ``app``."""

    @app.post("/webhooks/w/<token:str>", name="ingest")
    async def receive(request: Request, token: str) -> HTTPResponse:
        # Sanic already refused bodies over REQUEST_MAX_SIZE with 413 before routing.
        headers = Headers(list(request.headers.items()))
        reply = await ingest(
            rt,
            token,
            headers,
            request.body or b"",
            request.headers.get("content-type"),
            source_ip=request.remote_addr or request.ip or None,
        )
        # Written by orjson into a plain response: Sanic's JSONResponse would serialise with
        # json.dumps and keep the body around for later changes no receiver makes.
        return HTTPResponse(
            dumps_bytes(reply.body),
            status=reply.status,
            # every 503 says when to try again (a webhook with no live target yet)
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)} if reply.status == 503 else None,
            content_type="application/json",
        )
