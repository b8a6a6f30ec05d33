"""``switchboard serve``: migrate, then run Sanic on the configured address."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from ..runtime import Runtime


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default=None, help="listen address (default from SWITCHBOARD_ADDR)")
    p.add_argument("--port", type=int, default=None, help="listen port (default from SWITCHBOARD_ADDR)")
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="worker processes (default from config, 1)")


def run(args: argparse.Namespace, rt: Runtime) -> int:
    from sanic import Sanic

    dsn = rt.ensure_database()
    applied = asyncio.run(rt.migrate())
    if applied:
        print(f"switchboard: applied migrations {', '.join(applied)}", file=sys.stderr)
    host = args.host or rt.config.host
    port = args.port if args.port is not None else rt.config.port
    workers = args.workers or int(rt.config.section("server").get("workers", 1))
    access_log = bool(rt.config.section("server").get("access_log", False))
    print(f"switchboard: serving on http://{host}:{port} ({workers} worker(s))", file=sys.stderr)
    if workers == 1:
        from ..app import create_app

        app = create_app(rt)
        app.run(host=host, port=port, single_process=True, access_log=access_log, motd=False)
        return 0
    # Workers are fresh processes: hand them the database this process started and
    # let each rebuild its runtime from the same config.
    os.environ["SWITCHBOARD_DATABASE_URL"] = dsn
    if rt.config.path is not None:
        os.environ["SWITCHBOARD_CONFIG"] = str(rt.config.path)
    from sanic.worker.loader import AppLoader

    from ..app import app_from_environment

    loader = AppLoader(factory=app_from_environment)
    app = loader.load()
    app.prepare(host=host, port=port, workers=workers, access_log=access_log, motd=False)
    Sanic.serve(primary=app, app_loader=loader)
    return 0
