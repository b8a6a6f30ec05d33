"""The Sanic application factory: health, the receiver, and routes plugins add."""

from __future__ import annotations

import logging
import os
from typing import Any

from sanic import Request, Sanic, json
from sanic.exceptions import PayloadTooLarge, SanicException
from sanic.response import HTTPResponse

from . import admission, arrival, gctune, lifeline, loghygiene, scrape, stopsignals
from .config import load_config
from .errors import (
    RETRY_AFTER_SECONDS,
    StoreUnavailable,
    SwitchboardError,
    error_body,
    http_status,
)
from .runtime import Runtime
from .service.observe import flush_summary, observe_refusal

log = logging.getLogger("switchboard.app")

#: /healthz answers within a second whatever the database does: its check gets 0.6 s, the
#: rest is left to a loaded worker's own turn (0.8 s measured 0.81 s under a frozen
#: database, too close to the promise).
HEALTH_TIMEOUT_S = 0.6

#: Sanic's message for a header block over its limit (it raises PayloadTooLarge for both).
_HEADER_TOO_LARGE = "Request header exceeds the size limit"

#: Where deliveries arrive (see :mod:`switchboard.receiver`).
_INGEST_PREFIX = "/webhooks/"


def _connection(request: Request) -> Any:
    """Sanic's HTTP/1.1 connection state (``keep_alive``, ``expecting_continue``), if any.

    Sanic types ``request.stream`` as a narrow protocol; its HTTP/1.1 implementation
    carries the two flags the gate and the drain set.
    """
    return request.stream


def _retry_later(body: dict[str, Any]) -> HTTPResponse:
    return json(body, status=503, headers={"Retry-After": str(RETRY_AFTER_SECONDS)})


def create_app(rt: Runtime, name: str = "switchboard") -> Sanic[Any, Any]:
    loghygiene.install()
    arrival.name_every_status()
    if rt.config.section("server").get("access_log"):
        # In every worker: each builds its own app.
        loghygiene.enable_access_log()
    app: Sanic[Any, Any] = Sanic(name, configure_logging=False)
    # Refused at the headers on the declared length (arrival.BoundedHttp._admit), and by
    # Sanic on the bytes that arrive.
    app.config.REQUEST_MAX_SIZE = int(rt.config.section("ingest")["max_body_bytes"])
    app.config.KEEP_ALIVE_TIMEOUT = 30
    # Total deadlines on each request's arrival (read by arrival.BoundedProtocol, which
    # serve runs): Sanic's own REQUEST_TIMEOUT is reset by every byte.
    server = rt.config.section("server")
    app.config[arrival.HEADER_KEY] = int(server.get("header_timeout_ms", 10000)) / 1000
    app.config[arrival.BODY_KEY] = int(server.get("body_timeout_ms", 30000)) / 1000
    app.config[admission.TOTAL_KEY] = int(server.get("max_connections", admission.MAX_CONNECTIONS))
    app.config[admission.PER_CLIENT_KEY] = int(
        server.get("max_connections_per_client", admission.MAX_PER_CLIENT)
    )
    # How long a stop waits for the requests in flight before it cuts them.
    app.config.GRACEFUL_SHUTDOWN_TIMEOUT = float(server.get("shutdown_grace_s", 15))
    app.config.MOTD = False
    app.ctx.runtime = rt
    app.ctx.draining = False

    @app.before_server_start
    async def _open(app: Sanic[Any, Any]) -> None:
        if lifeline.is_worker() and not lifeline.bind_to_serve():
            app.add_task(lifeline.watch_serve(), name="switchboard-lifeline")
        await rt.open_store(migrate=False)
        await rt.startup()
        from .service.triage import Triage

        # The deferred stages' worker of this process (none when no stage defers).
        app.ctx.triage = Triage(rt)
        app.ctx.triage.start()
        from .service.pruner import Pruner

        # Event retention ([retention]), a background job off the request path.
        app.ctx.pruner = Pruner(rt)
        app.ctx.pruner.start()
        # Everything loaded so far (Sanic, psycopg, jsonschema, the plugins: ~130,000
        # objects) lives as long as the worker. Left to the collector, each full collection
        # walked all of them again, stopping every request for 65-130 ms a few times a
        # minute under load; frozen, a collection walks only what requests made since.
        gctune.settle()

    @app.after_server_start
    async def _stop_once(app: Sanic[Any, Any]) -> None:
        # after Sanic set its signal handlers, which this replaces in a worker
        stopsignals.first_stop_only(app)

    @app.before_server_stop
    async def _drain(app: Sanic[Any, Any]) -> None:
        # From the stop signal on, no new request starts (see arrival.BoundedHttp._admit) and every response
        # closes its connection; in-flight requests and their sinks finish.
        app.ctx.draining = True
        from .service.sinkrun import drain_sinks

        pruner = getattr(app.ctx, "pruner", None)
        if pruner is not None:
            await pruner.stop()  # after its batch in flight
        triage = getattr(app.ctx, "triage", None)
        if triage is not None:
            # In-flight stage runs finish or give their leases back (another worker's).
            await triage.stop()
        await drain_sinks(app.config.GRACEFUL_SHUTDOWN_TIMEOUT)
        # Until here a new connection is still accepted, and answered 503 (arrival.BoundedHttp._admit); from
        # here on refused, in every worker at once (not queued to be reset). Last, as
        # Sanic closes this worker's own listener right after: see stop_accepting.
        arrival.stop_accepting(app)

    @app.after_server_stop
    async def _close(app: Sanic[Any, Any]) -> None:
        if cut := arrival.cut_at_stop():
            log.warning(
                "shutdown: %d request(s) still in flight after server.shutdown_grace_s (%g s)"
                " were cut",
                cut,
                app.config.GRACEFUL_SHUTDOWN_TIMEOUT,
            )
        await rt.shutdown()
        flush_summary()
        scrape.process_exit()

    @app.on_response
    async def _close_when_draining(request: Request, response: HTTPResponse) -> None:
        stream = _connection(request)
        if app.ctx.draining and stream is not None:
            stream.keep_alive = False

    # HEAD too: load balancers and uptime checkers often ask with it (the status, no body)
    @app.route("/healthz", methods=["GET", "HEAD"])
    async def healthz(request: Request) -> HTTPResponse:
        if await rt.store.db.ping(timeout=HEALTH_TIMEOUT_S):
            return json({"status": "ok", "database": "ok"})
        return _retry_later({"status": "unavailable", "database": "unreachable"})

    @app.exception(PayloadTooLarge)
    async def _too_large(request: Request, exc: Exception) -> HTTPResponse:
        status = 431 if str(exc) == _HEADER_TOO_LARGE else 413
        if request.path.startswith(_INGEST_PREFIX):
            # Refused before the receiver ran: counted and logged here (the path is not).
            observe_refusal(status)
        return json(error_body(status), status=status)

    @app.exception(SwitchboardError)
    async def _service_error(request: Request, exc: SwitchboardError) -> HTTPResponse:
        status = http_status(exc)
        body = {"error": str(exc), "code": getattr(exc, "code", "internal")}
        if isinstance(exc, StoreUnavailable):
            # The driver's text names hosts and databases: it goes to the log, not the client.
            log.warning("%s %s: %s: %s", request.method, request.path, exc, exc.detail)
            return _retry_later(body)
        if status >= 500:
            log.error("request failed: %s", exc)
        if status == 500:
            # a fault of ours (a secret key that no longer opens a webhook's secret): its
            # words are the operator's, in the log; a client is told only that it failed
            body = error_body(500)
        return json(body, status=status)

    @app.exception(SanicException)
    async def _sanic_error(request: Request, exc: SanicException) -> HTTPResponse:
        # A fixed body per status: Sanic's own text quotes the path (GET on an ingest URL
        # would answer 405 "Method GET not allowed for URL /webhooks/w/<token>").
        status = getattr(exc, "status_code", 500)
        # Our own refusals at arrival say what was wrong (the deadline and its setting, the
        # Expect value); their text quotes no path.
        own = isinstance(exc, arrival.OWN_WORDS)
        body = error_body(status, str(exc) if own else None)
        if own and request.path.startswith(_INGEST_PREFIX):
            # a delivery cut short (408) or refused for its Expect (417) before the receiver
            # ran: a line and a count, as a 413's (a header block never finished has no path)
            observe_refusal(status)
        if status == 503:
            return _retry_later(body)
        allow = (exc.headers or {}).get("Allow") if status == 405 else None
        return json(body, status=status, headers={"Allow": allow} if allow else None)

    @app.exception(Exception)
    async def _unexpected(request: Request, exc: Exception) -> HTTPResponse:
        log.exception("unexpected error on %s %s", request.method, request.path)
        return json(error_body(500), status=500)

    from .receiver import add_receiver_routes

    add_receiver_routes(app, rt)
    scrape.add_metrics_route(app, rt)
    rt.pm.hook.switchboard_register_routes(app=app, runtime=rt)
    arrival.read_bodies_first(app)
    return app


def app_from_environment() -> Sanic[Any, Any]:
    """Factory for Sanic's multi-worker loader: each worker rebuilds its runtime.

    The level and format ``serve`` resolved (flags over config) arrive in the environment.
    """
    from . import logsetup

    logsetup.configure(
        logsetup.level_number(os.environ.get(logsetup.LEVEL_ENV), logging.INFO),
        logsetup.resolve_format(os.environ.get(logsetup.FORMAT_ENV)),
    )
    return create_app(Runtime(load_config()))
