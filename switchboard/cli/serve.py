"""``switchboard serve``: migrate, then run Sanic on the configured address."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from typing import Any

from psycopg.conninfo import conninfo_to_dict

from ..config import WORKERS_ENV, ServerSizes, base_url_mismatch, server_sizes, usable_cpus
from ..plugins import list_plugins
from ..runtime import Runtime

log = logging.getLogger("switchboard.serve")


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default=None, help="listen address (default from SWITCHBOARD_ADDR)")
    p.add_argument(
        "--port", type=int, default=None, help="listen port (default from SWITCHBOARD_ADDR)"
    )
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="worker processes (default [server] workers: auto, one per usable CPU)",
    )


def database_where(rt: Runtime, dsn: str) -> str:
    """Where the database is, without its credentials: embedded under a directory, or host:port/db."""
    if rt.config.database_url is None:
        return f"embedded under {rt.config.data_dir}"
    try:
        parts = conninfo_to_dict(dsn)
    except Exception:
        return "external (unparsable DSN)"
    host = str(parts.get("host") or "localhost")
    port, name = parts.get("port") or 5432, parts.get("dbname") or "?"
    if host.startswith("/"):
        return f"external, socket in {host} (port {port}), database {name}"
    return f"external {host}:{port}/{name}"


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
    # Sanic (through scrape) only here: every other command starts ~0.1 s sooner without it
    from sanic import Sanic

    from .. import lifeline, scrape
    from ..arrival import BoundedProtocol
    from ..store.supervise import Supervisor
    from .manager_fixes import killing_spares_the_main_process, stop_during_start_ends_the_wait

    dsn = rt.ensure_database()
    embedded = rt.embedded
    if embedded is not None:
        # Dies with this process (a daemon thread); workers reconnect through their pools.
        Supervisor(embedded).start()
    applied = asyncio.run(rt.migrate())
    if applied:
        print(f"switchboard: applied migrations {', '.join(applied)}", file=sys.stderr)
    host = args.host or rt.config.host
    port = args.port if args.port is not None else rt.config.port
    sizes = server_sizes(rt.config, args.workers or None)
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
        log_startup(rt, dsn, app, base, scrape.start_listener(rt.config, dsn))
        app.run(
            host=host,
            port=port,
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

    stop_during_start_ends_the_wait()
    killing_spares_the_main_process()
    loader = AppLoader(factory=app_from_environment)
    app = loader.load()
    # Sanic ends with os._exit after a kill (a worker that never came up): the embedded
    # server is stopped here, before that, not only when run() returns.
    app.register_listener(lambda _app: rt.stop_embedded(), "main_process_stop")
    log_startup(rt, dsn, app, base, scrape.start_listener(rt.config, dsn))
    app.prepare(
        host=host,
        port=port,
        workers=workers,
        access_log=access_log,
        motd=False,
        protocol=BoundedProtocol,
    )
    Sanic.serve(primary=app, app_loader=loader)
    return 0
