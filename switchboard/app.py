"""The Sanic application factory: health, the receiver, and routes plugins add."""

from __future__ import annotations

import logging
from typing import Any

from sanic import Request, Sanic, json
from sanic.exceptions import PayloadTooLarge, SanicException
from sanic.response import HTTPResponse

from .config import load_config
from .errors import SwitchboardError, http_status
from .runtime import Runtime

log = logging.getLogger("switchboard.app")


def create_app(rt: Runtime, name: str = "switchboard") -> Sanic[Any, Any]:
    app: Sanic[Any, Any] = Sanic(name, configure_logging=False)
    app.config.REQUEST_MAX_SIZE = int(rt.config.section("ingest")["max_body_bytes"])
    app.config.KEEP_ALIVE_TIMEOUT = 30
    app.config.MOTD = False
    app.ctx.runtime = rt

    @app.before_server_start
    async def _open(app: Sanic[Any, Any]) -> None:
        await rt.open_store(migrate=False)
        await rt.startup()

    @app.after_server_stop
    async def _close(app: Sanic[Any, Any]) -> None:
        await rt.shutdown()

    @app.get("/healthz")
    async def healthz(request: Request) -> HTTPResponse:
        try:
            ok = await rt.store.db.ping()
        except Exception as exc:
            log.warning("health check failed: %s", exc)
            ok = False
        if ok:
            return json({"status": "ok", "database": "ok"})
        return json({"status": "unavailable", "database": "unreachable"}, status=503)

    @app.exception(PayloadTooLarge)
    async def _too_large(request: Request, exc: Exception) -> HTTPResponse:
        return json({"error": "payload too large"}, status=413)

    @app.exception(SwitchboardError)
    async def _service_error(request: Request, exc: SwitchboardError) -> HTTPResponse:
        status = http_status(exc)
        if status >= 500:
            log.error("request failed: %s", exc)
        return json({"error": str(exc), "code": getattr(exc, "code", "internal")}, status=status)

    @app.exception(SanicException)
    async def _sanic_error(request: Request, exc: SanicException) -> HTTPResponse:
        return json({"error": str(exc) or "error"}, status=getattr(exc, "status_code", 500))

    @app.exception(Exception)
    async def _unexpected(request: Request, exc: Exception) -> HTTPResponse:
        log.exception("unexpected error on %s %s", request.method, request.path)
        return json({"error": "internal error"}, status=500)

    from .receiver import add_receiver_routes

    add_receiver_routes(app, rt)
    rt.pm.hook.switchboard_register_routes(app=app)
    return app


def app_from_environment() -> Sanic[Any, Any]:
    """Factory for Sanic's multi-worker loader: each worker rebuilds its runtime."""
    return create_app(Runtime(load_config()))
