"""``switchboard serve``: migrate, then run Sanic on the configured address."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
import sys
from typing import Any

from ..config import (
    WORKERS_ENV,
    ServerSizes,
    base_url_mismatch,
    database_timeout_s,
    server_sizes,
    usable_cpus,
)
from ..errors import ConfigError, SwitchboardError
from ..oserrors import os_reason
from ..plugins import list_plugins
from ..runtime import Runtime
from ..store.dsn import dsn_where
from .main import driver_warnings_quiet

log = logging.getLogger("switchboard.serve")

#: ``--workers``' range: ``[server] workers``' (schemas/config.schema.json).
WORKERS_MIN, WORKERS_MAX = 1, 64


def port_number(text: str) -> int:
    """``--port``: 0 to 65535 (0: a free port the system picks; serve prints which)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0 to 65535)") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is out of range: a port is 0 to 65535")
    return value


def worker_count(text: str) -> int:
    """``--workers``: as ``[server] workers``, 1 to 64 (omit it for auto)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (1 to 64)") from None
    if value < WORKERS_MIN:
        raise argparse.ArgumentTypeError(
            f"must be at least {WORKERS_MIN} (1 to {WORKERS_MAX}; omit it for one per CPU)"
        )
    if value > WORKERS_MAX:
        raise argparse.ArgumentTypeError(f"must be at most {WORKERS_MAX}")
    return value


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default=None, help="listen address (default from SWITCHBOARD_ADDR)")
    p.add_argument(
        "--port",
        type=port_number,
        default=None,
        help="listen port, 0 to 65535 (default from SWITCHBOARD_ADDR; 0: any free port)",
    )
    p.add_argument(
        "--workers",
        type=worker_count,
        default=None,
        metavar="N",
        help="worker processes, 1 to 64 (default [server] workers: auto, one per usable CPU)",
    )


def database_where(rt: Runtime, dsn: str) -> str:
    """Where the database is, without its credentials: embedded under a directory, or host:port/db."""
    if rt.config.database_url is None:
        return f"embedded under {rt.config.data_dir}"
    return f"external {dsn_where(dsn)}"


def listen(host: str, port: int, what: str, workers: int) -> socket.socket:
    """``host:port`` taken before anything else starts (``listeners.listen``: a listening
    socket, or the reservation each of several workers listens beside).

    A port another process holds is exit 1 (the command was right, the machine is busy),
    one no socket can have exit 2; either is one line naming the address and ``what`` set it.
    """
    from . import listeners

    try:
        return listeners.listen(host, port, workers=workers)
    except OverflowError:
        raise ConfigError(
            f"cannot listen on {host}:{port} ({what}): a port is 0 to 65535"
        ) from None
    except OSError as exc:
        raise SwitchboardError(f"cannot listen on {host}:{port}: {os_reason(exc)}") from None


def start_metrics(rt: Runtime, dsn: str) -> str | None:
    """The ``[metrics] addr`` listener (see :func:`scrape.start_listener`), its failure to
    bind one line naming the address."""
    from .. import scrape

    addr = scrape.settings(rt.config)[1]
    try:
        return scrape.start_listener(rt.config, dsn)
    except OverflowError:
        raise ConfigError(
            f"cannot listen on {addr} ([metrics] addr): a port is 0 to 65535"
        ) from None
    except OSError as exc:
        raise SwitchboardError(
            f"cannot listen on {addr} ([metrics] addr): {os_reason(exc)}"
        ) from None


def describe_sizes(sizes: ServerSizes) -> str:
    """The worker count and pool sizes, saying which were chosen automatically and why."""
    how = f"auto, {usable_cpus()} usable CPU(s)" if "workers" in sizes.auto else "set"
    pool = "auto" if {"pool_min_size", "pool_max_size"} & set(sizes.auto) else "set"
    return (
        f"workers {how}; database pool {sizes.pool_min}-{sizes.pool_max} connections"
        f" per worker ({pool}), at most {sizes.workers * sizes.pool_max} in all"
    )


def log_startup(rt: Runtime, dsn: str, app: Any, base: str, metrics_url: str | None) -> None:
    """The start-up lines: plugins, stages, database, and which address serves what."""
    from .. import scrape

    plugins = ", ".join(f"{p.name} {p.version or '?'}" for p in list_plugins(rt.pm))
    log.info("plugins active: %s", plugins)
    if rt.stages:
        log.info("routing stages: %s", ", ".join(s.name for s in rt.stages))
    else:  # only ever on purpose (routing.stages = []): the config refuses it otherwise
        log.warning("routing stages: none (routing.stages = []): every delivery takes the default")
    log.info("database: %s", database_where(rt, dsn))
    routes = sorted({"/" + r.path.lstrip("/") for r in app.router.routes})
    served = [r for r in routes if r != scrape.PATH]
    log.info("serving on %s: %s", base, ", ".join(served))
    if metrics_url:
        log.info("metrics on %s", metrics_url)
    elif scrape.PATH in routes:
        log.info("metrics on %s%s", base, scrape.PATH)
    else:
        log.info("metrics disabled")


def run(args: argparse.Namespace, rt: Runtime) -> int:
    """Take the listening socket and the secret key first: an address another process
    holds, or a data dir the key cannot be kept in, stops the start before the database
    (and any worker) is started, with one line (never at the first delivery)."""
    host = args.host or rt.config.host
    port = args.port if args.port is not None else rt.config.port
    load_secret_key(rt)
    sizes = server_sizes(rt.config, args.workers)
    sock = listen(host, port, "--port" if args.port is not None else "addr", sizes.workers)
    try:
        return _serve(rt, sock, host, sizes)
    finally:
        sock.close()  # Sanic closes it when it served; this is for a start that failed


def load_secret_key(rt: Runtime) -> None:
    """The signing-secret key, loaded (or generated into ``data_dir``) now."""
    rt.secrets.seal("")


def secret_key_from(rt: Runtime) -> str:
    """Where the signing-secret key came from: its variable, the config file's key, or
    the file it was generated into."""
    if rt.config.raw["secret_key"]:
        return rt.config.origin.where(("secret_key",))
    return str(rt.config.data_dir / "secret.key")


#: The signing secrets sealed last (created or rotated): the key in use must open them.
_RECENT_SECRETS_SQL = """
    SELECT signing_secret_enc FROM endpoint_webhooks
    WHERE signing_secret_enc IS NOT NULL
    ORDER BY coalesce(rotated_at, created_at) DESC
    LIMIT 100
"""


async def check_secret_key(rt: Runtime, dsn: str) -> None:
    """Refuse to serve with a key that opens none of the stored signing secrets (a
    ``ConfigError`` naming where the key came from): every signed delivery would fail
    (500), found only when producers send. Some that it does not open (sealed under
    another key since) are a warning: those webhooks' deliveries fail until rotated."""
    import psycopg

    from ..store.dsn import unreachable
    from ..store.migrate import fetch_once

    timeout_s = database_timeout_s(rt.config)
    try:
        rows = await fetch_once(dsn, _RECENT_SECRETS_SQL, timeout=timeout_s)
    except psycopg.OperationalError as exc:
        raise unreachable(dsn, rt.database_url_from(), exc) from exc
    if not rows:
        return
    unopened = sum(not rt.secrets.opens(row["signing_secret_enc"]) for row in rows)
    if unopened == len(rows):
        raise ConfigError(
            f"the secret key from {secret_key_from(rt)} does not open the signing secrets"
            f" stored in the database ({database_where(rt, dsn)}): they were sealed with"
            " another key; give the key they were sealed with (SWITCHBOARD_SECRET_KEY,"
            " secret_key, or the data dir's secret.key), else every signed delivery fails"
        )
    if unopened:
        log.warning(
            "the secret key from %s does not open %d of the %d newest stored signing secrets:"
            " deliveries to those webhooks fail until they are rotated",
            secret_key_from(rt),
            unopened,
            len(rows),
        )


def _serve(rt: Runtime, sock: socket.socket, host: str, sizes: ServerSizes) -> int:
    # Sanic (through scrape) only here: every other command starts ~0.1 s sooner without it
    from sanic import Sanic

    from .. import lifeline, scrape
    from ..arrival import BoundedProtocol
    from ..store.supervise import Supervisor
    from .manager_fixes import (
        killing_spares_the_main_process,
        stop_during_start_ends_the_wait,
        stop_handler_has_its_own_connection,
        stopping_a_start_is_quiet,
    )

    dsn = rt.ensure_database()
    embedded = rt.embedded
    if embedded is not None:
        # Dies with this process (a daemon thread); workers reconnect through their pools.
        Supervisor(embedded).start()
    with driver_warnings_quiet():  # a database it cannot use is one error line
        applied = asyncio.run(rt.migrate())
        asyncio.run(check_secret_key(rt, dsn))
    if applied:
        print(f"switchboard: applied migrations {', '.join(applied)}", file=sys.stderr)
    port = int(sock.getsockname()[1])  # the one the system picked for --port 0
    workers = sizes.workers
    access_log = bool(rt.config.section("server").get("access_log", False))
    print(
        f"switchboard: serving on http://{host}:{port} ({workers} worker(s)): "
        f"{describe_sizes(sizes)}",
        file=sys.stderr,
    )
    mismatch = base_url_mismatch(rt.config, port)
    if mismatch:
        log.warning("%s", mismatch)
    # Each worker sizes its own pool by the count chosen here (a flag may override config).
    os.environ[WORKERS_ENV] = str(workers)
    base = f"http://{host}:{port}"
    if workers == 1:
        from ..app import create_app

        app = create_app(rt)
        log_startup(rt, dsn, app, base, start_metrics(rt, dsn))
        app.run(
            sock=sock,
            single_process=True,
            access_log=access_log,
            motd=False,
            protocol=BoundedProtocol,
        )
        return 0
    # Workers are fresh processes: hand them the database this process started and
    # let each rebuild its runtime from the same config. Each writes its series to the
    # shared directory; a scrape sums them.
    os.environ["SWITCHBOARD_DATABASE_URL"] = dsn
    # Each worker dies with this process (lifeline): it checks it has this parent.
    os.environ[lifeline.SERVE_PID_ENV] = str(os.getpid())
    if rt.config.path is not None:
        os.environ["SWITCHBOARD_CONFIG"] = str(rt.config.path)
    scrape.prepare_multiprocess()
    from sanic.worker.loader import AppLoader

    from ..app import app_from_environment

    metrics_url = start_metrics(rt, dsn)
    stop_during_start_ends_the_wait()
    killing_spares_the_main_process()
    stop_handler_has_its_own_connection()
    stopping_a_start_is_quiet()
    loader = AppLoader(factory=app_from_environment)
    app = loader.load()
    # Sanic ends with os._exit after a kill (a worker that never came up): the embedded
    # server is stopped here, before that, not only when run() returns.
    app.register_listener(lambda _app: rt.stop_embedded(), "main_process_stop")
    log_startup(rt, dsn, app, base, metrics_url)
    app.prepare(
        sock=sock,
        workers=workers,
        access_log=access_log,
        motd=False,
        protocol=BoundedProtocol,
    )
    Sanic.serve(primary=app, app_loader=loader)
    return 0
