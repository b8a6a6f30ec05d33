"""Receiver throughput vs the database's own ceiling, for a webhook without rules.

Run: python bench/ingest.py [--total N] [--workers W (default: serve's own, a worker per
usable CPU)] [--pgbench-seconds S] [--floor]
Prints deliveries/s and p50/p99 at 1, 8 and 32 concurrent clients over loopback, beside
two ceilings measured against the same PostgreSQL in the same run: pgbench at 32 clients
running the same rows (event + todo) as one single-statement transaction, prepared, and
the same insert pair issued through psycopg at each level's concurrency. The ratios are
receiver/pgbench and receiver/psycopg; for each level, the store's batch sizes (write and
resolve steps) from the server's /metrics, and the workers' CPU a delivery and each one's
share of it. With --floor, also the HTTP floor: a bare Sanic
app with as many workers answering a fixed 202 to the same client at the pgbench clients'
count (bare_sanic.py), and its own ratio to pgbench: what no Sanic receiver can exceed here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

sys.path.insert(0, str(Path(__file__).parent))
from harness import (  # noqa: E402
    batch_line,
    cli,
    database,
    free_port,
    generic_webhook,
    histogram_diff,
    load,
    pgbench,
    scrape_histogram,
    serve,
    summary,
    wait_healthy,
)
from procs import cpus, shares, workers  # noqa: E402

TRACE = {"stage": "default", "cause": "no_match_default", "action": {"queue": "inbox"}}

BODY = json.dumps({"action": "opened", "number": 7, "title": "bench", "text": "x" * 512}).encode()


async def ceiling(
    dsn: str, webhook_id: str, endpoint_id: str, concurrency: int, total: int
) -> tuple[float, list[float]]:
    """The same event + todo transaction, straight through psycopg."""
    latencies: list[float] = []
    remaining = total
    trace = TRACE
    async with AsyncConnectionPool(
        dsn, min_size=concurrency, max_size=concurrency, kwargs={"autocommit": True}
    ) as pool:

        async def worker() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                ext = f"{webhook_id}:{uuid.uuid4()}"
                start = time.perf_counter()
                async with pool.connection() as conn, conn.transaction():
                    cur = await conn.execute(
                        "INSERT INTO events (source, kind, external_id, headers, body,"
                        " content_type, size, verified, trust_mode, webhook_id, routing_trace,"
                        " disposition)"
                        " VALUES ('generic', NULL, %s, %s, %s, 'application/json', %s, false,"
                        " 'token', %s, %s, 'routed') ON CONFLICT ON CONSTRAINT events_dedup DO NOTHING"
                        " RETURNING id",
                        (
                            ext,
                            Jsonb({"content-type": "application/json"}),
                            BODY,
                            len(BODY),
                            webhook_id,
                            Jsonb(trace),
                        ),
                    )
                    row = await cur.fetchone()
                    assert row is not None
                    await conn.execute(
                        "INSERT INTO todos (endpoint_id, queue, idempotency_key, title, payload,"
                        " event_id, routing_trace) VALUES (%s, 'inbox', %s, 'bench', %s, %s, %s)"
                        " ON CONFLICT (endpoint_id, idempotency_key)"
                        " WHERE state IN ('pending', 'claimed') DO NOTHING RETURNING id",
                        (
                            endpoint_id,
                            ext,
                            Jsonb({"payload": json.loads(BODY)}),
                            row[0],
                            Jsonb(trace),
                        ),
                    )
                latencies.append(time.perf_counter() - start)

        start = time.perf_counter()
        await asyncio.gather(*[worker() for _ in range(concurrency)])
        return time.perf_counter() - start, latencies


def pgbench_script(webhook_id: str, endpoint_id: str) -> str:
    """The ceiling's rows as one statement: the event, then its todo from the event's id.

    Literals only (no pgbench variables), so the JSON's colons are never read as one; the
    external id is unique per transaction through gen_random_uuid().
    """

    def lit(value: str) -> str:
        return "'" + value.replace("'", "''") + "'"

    headers = lit(json.dumps({"content-type": "application/json"}))
    payload = lit(json.dumps({"payload": json.loads(BODY)}))
    trace = lit(json.dumps(TRACE))
    return (
        "WITH ev AS (INSERT INTO events (source, kind, external_id, headers, body, content_type,"
        " size, verified, trust_mode, webhook_id, routing_trace, disposition)"
        f" VALUES ('generic', NULL, {lit(webhook_id + ':')} || gen_random_uuid()::text,"
        f" {headers}::jsonb, decode('{BODY.hex()}', 'hex'), 'application/json', {len(BODY)},"
        f" false, 'token', {lit(webhook_id)}::uuid, {trace}::jsonb, 'routed')"
        " ON CONFLICT ON CONSTRAINT events_dedup DO NOTHING RETURNING id, external_id)"
        " INSERT INTO todos (endpoint_id, queue, idempotency_key, title, payload, event_id,"
        f" routing_trace) SELECT {lit(endpoint_id)}::uuid, 'inbox', ev.external_id, 'bench',"
        f" {payload}::jsonb, ev.id, {trace}::jsonb FROM ev"
        " ON CONFLICT (endpoint_id, idempotency_key) WHERE state IN ('pending', 'claimed')"
        " DO NOTHING;\n"
    )


def _run(coro: object) -> object:
    """Run the load generator on uvloop when available: the client shares the 2 cores."""
    try:
        import uvloop

        return uvloop.run(coro)  # type: ignore[arg-type]
    except ImportError:
        return asyncio.run(coro)  # type: ignore[arg-type]


def _sizes(workers: int | None) -> Any:
    """What serve will choose with its defaults (the same CPUs: it inherits our affinity);
    a checkout from before the "auto" sizes (measured side by side) says its own."""
    from switchboard.config import load_config

    try:
        from switchboard.config import server_sizes
    except ImportError:  # before issue 13: [server] workers 1, pool 2-20
        return SimpleNamespace(workers=workers or 1, pool_min=2, pool_max=20)
    return server_sizes(load_config(env={}), workers, env={})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--total", type=int, default=3000, help="deliveries per level")
    ap.add_argument(
        "--workers",
        type=int,
        default=None,
        help="Sanic workers (default: serve's own, one per usable CPU)",
    )
    ap.add_argument("--levels", default="1,8,32")
    ap.add_argument("--pgbench-clients", type=int, default=32)
    ap.add_argument("--pgbench-seconds", type=float, default=5.0)
    ap.add_argument(
        "--floor",
        action="store_true",
        help="also measure a bare Sanic app that does nothing (bare_sanic.py)",
    )
    args = ap.parse_args()
    sizes = _sizes(args.workers)
    with database() as dsn, tempfile.TemporaryDirectory() as tmp:
        srv = serve(dsn, Path(tmp), workers=args.workers)
        try:
            cli(srv.env, "human", "add", "bench")
            hook = generic_webhook(srv.env)
            _run(load(hook["ingest_url"], BODY, 8, 300))  # warm up
            bench = pgbench(
                dsn,
                pgbench_script(hook["webhook_id"], hook["endpoint_id"]),
                args.pgbench_clients,
                args.pgbench_seconds,
            )
            print(
                f"ingest benchmark: {args.total} deliveries per level, body {len(BODY)} B,"
                f" {sizes.workers} Sanic worker(s)"
                f" ({'auto' if args.workers is None else 'set'}), pool"
                f" {sizes.pool_min}-{sizes.pool_max} per worker, no rules"
            )
            print(
                f"pgbench ceiling: {bench.tps:.0f} tps at {args.pgbench_clients} clients"
                f" (latency {bench.latency_ms or 0:.2f} ms, {bench.transactions}"
                f" transactions in {args.pgbench_seconds:g} s, {bench.failed} failed;"
                " event + todo as one prepared statement)"
            )
            print(
                f"{'clients':>7} | {'receiver/s':>10} {'p50 ms':>7} {'p99 ms':>7} |"
                f" {'psycopg/s':>9} {'p50 ms':>7} {'p99 ms':>7} | {'/pgbench':>8}"
                f" {'/psycopg':>8}"
            )
            for level in [int(x) for x in args.levels.split(",")]:
                before = scrape_histogram(srv.base_url)
                procs = workers(srv.proc.pid)
                cpu = cpus(procs)
                r = summary(*_run(load(hook["ingest_url"], BODY, level, args.total)))
                each = [b - a for a, b in zip(cpu, cpus(procs), strict=True)]
                batches = histogram_diff(before, scrape_histogram(srv.base_url))
                c = summary(
                    *_run(ceiling(dsn, hook["webhook_id"], hook["endpoint_id"], level, args.total))
                )
                print(
                    f"{level:>7} | {r['per_s']:>10.0f} {r['p50_ms']:>7.2f} {r['p99_ms']:>7.2f} |"
                    f" {c['per_s']:>9.0f} {c['p50_ms']:>7.2f} {c['p99_ms']:>7.2f} |"
                    f" {r['per_s'] / bench.tps:>8.0%} {r['per_s'] / c['per_s']:>8.0%}"
                )
                for step in ("write", "resolve"):
                    print(f"{'':>7}   batch sizes, {batch_line(batches, step)}")
                print(
                    f"{'':>7}   workers' CPU: {sum(each) / args.total * 1e6:.0f} µs a delivery,"
                    f" by worker {shares(each)}"
                )
            if args.floor:
                per_s = floor(sizes.workers, args.pgbench_clients, args.total)
                print(
                    f"HTTP floor (bare_sanic.py, {sizes.workers} worker(s), a fixed 202, no"
                    f" work) at {args.pgbench_clients} clients: {per_s:.0f}/s, "
                    f"{per_s / bench.tps:.0%} of pgbench"
                )
        finally:
            srv.stop()


def floor(workers: int, clients: int, total: int) -> float:
    """Deliveries/s a Sanic app answering a fixed 202 reaches with the same client."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("bare_sanic.py")), str(port), str(workers)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_healthy(f"http://127.0.0.1:{port}")
        url = f"http://127.0.0.1:{port}/hooks/bare"
        _run(load(url, BODY, clients, 300))  # warm up
        return summary(*_run(load(url, BODY, clients, total)))["per_s"]
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()


if __name__ == "__main__":
    main()
