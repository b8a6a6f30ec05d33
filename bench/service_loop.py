"""A delivery's CPU without HTTP: ``ingest()`` called in process, on a real database.

Run: python bench/service_loop.py [--total N] [--clients C] [--rules] [--profile FILE]
Creates one generic webhook (no rules; ``--rules``: routing.py's 32) through a short-lived
``switchboard serve`` on an embedded PostgreSQL, then calls the service layer's
``ingest()`` for N unique ~5 KB deliveries from C concurrent tasks in this process (uvloop,
the workers' garbage collector setting, the delivery log to a file, the metrics as a
worker keeps them) and prints deliveries/s and this process's CPU per delivery (with
``--rules``, the rules sandbox's processes apart: only what routing costs the worker
itself). With no HTTP, no other worker and no load client in the process, the figure holds
to about 1 % run to run on a quiet host, where the end-to-end benches swing ±10 % (on a
noisy one both swing more: bench/README.md, seventh pass): made to compare two trees of
the code (``PYTHONPATH=<tree>:<tree>/plugins``) one change at a time. ``--profile`` samples it with
py-spy (raw format) meanwhile.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from harness import cli, database, generic_webhook, py_spy, serve  # noqa: E402
from routing import BODY, set_rules  # noqa: E402


async def _run(env: dict[str, str], token: str, total: int, clients: int, spy: Path | None) -> None:
    from switchboard import gctune
    from switchboard.config import load_config
    from switchboard.runtime import Runtime
    from switchboard.service.ingest import ingest
    from switchboard.sources import Headers

    try:
        from switchboard.service.sinkrun import drain_sinks
    except ImportError:  # a tree from before the sinks' turn
        from switchboard.service.ingest import drain_sinks  # type: ignore[attr-defined,no-redef]

    rt = Runtime(load_config(None, env=env))
    await rt.open_store(migrate=False)
    gctune.settle()

    async def client(n: int) -> None:
        for _ in range(n):
            headers = Headers(
                [
                    ("host", "bench"),
                    ("content-type", "application/json"),
                    ("x-delivery-id", str(uuid.uuid4())),
                    ("content-length", str(len(BODY))),
                ]
            )
            reply = await ingest(rt, token, headers, BODY, "application/json")
            if reply.status != 202:
                raise RuntimeError(f"unexpected reply {reply}")

    await asyncio.gather(*(client(200 // clients) for _ in range(clients)))  # warm up
    spying: subprocess.Popen[Any] | None = None
    if spy is not None:
        spying = subprocess.Popen(
            [py_spy(), "record", "--pid", str(os.getpid()), "--rate", "1000",
             "--format", "raw", "--output", str(spy), "--nonblocking"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        await asyncio.sleep(1.0)
    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(client(total // clients) for _ in range(clients)))
    await drain_sinks()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    if spying is not None:
        spying.send_signal(2)
        spying.wait(30)
    done = total // clients * clients
    print(
        f"{done} deliveries from {clients} tasks: {done / wall:.0f}/s,"
        f" {cpu / done * 1e6:.1f} µs of CPU per delivery"
    )
    await rt.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--total", type=int, default=6000)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--rules", action="store_true", help="32 rules on the webhook")
    ap.add_argument("--profile", type=Path, default=None, help="py-spy's raw samples here")
    args = ap.parse_args()
    import uvloop

    with database() as dsn, tempfile.TemporaryDirectory() as tmp:
        # a worker's metrics: per-process files, set before prometheus-client is imported
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(dir=tmp)
        from switchboard import logsetup

        srv = serve(dsn, Path(tmp), workers=1)
        try:
            cli(srv.env, "human", "add", "bench")
            hook = generic_webhook(srv.env)
            if args.rules:
                asyncio.run(set_rules(srv.env, hook["webhook_id"]))
        finally:
            srv.stop()
        env = {**os.environ, **srv.env}
        logsetup.configure(logging.INFO, "json")
        handler = logging.getLogger().handlers[0]
        assert isinstance(handler, logging.StreamHandler)
        handler.setStream(open(Path(tmp) / "log", "w"))  # noqa: SIM115 - lives as long as the run
        token = hook["ingest_url"].rsplit("/", 1)[1]
        uvloop.run(_run(env, token, args.total, args.clients, args.profile))


if __name__ == "__main__":
    main()
