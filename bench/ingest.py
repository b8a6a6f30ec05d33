"""Receiver throughput vs the raw PostgreSQL ceiling, for a webhook without rules.

Run: python bench/ingest.py [--total N] [--workers W (default 2)]
Prints deliveries/s and p50/p99 at 1, 8 and 32 concurrent clients over loopback, beside
the same machine's ceiling: the same event + todo insert transaction issued directly
through psycopg at the same concurrency, measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

sys.path.insert(0, str(Path(__file__).parent))
from harness import cli, database, load, serve, summary  # noqa: E402

BODY = json.dumps({"action": "opened", "number": 7, "title": "bench", "text": "x" * 512}).encode()


async def ceiling(dsn: str, webhook_id: str, endpoint_id: str, concurrency: int,
                  total: int) -> tuple[float, list[float]]:
    """The same event + todo transaction, straight through psycopg."""
    latencies: list[float] = []
    remaining = total
    trace = {"stage": "default", "cause": "no_match_default", "action": {"queue": "inbox"}}
    async with AsyncConnectionPool(dsn, min_size=concurrency, max_size=concurrency,
                                   kwargs={"autocommit": True}) as pool:

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
                        (ext, Jsonb({"content-type": "application/json"}), BODY, len(BODY),
                         webhook_id, Jsonb(trace)))
                    row = await cur.fetchone()
                    assert row is not None
                    await conn.execute(
                        "INSERT INTO todos (endpoint_id, queue, idempotency_key, title, payload,"
                        " event_id, routing_trace) VALUES (%s, 'inbox', %s, 'bench', %s, %s, %s)"
                        " ON CONFLICT (endpoint_id, idempotency_key)"
                        " WHERE state IN ('pending', 'claimed') DO NOTHING RETURNING id",
                        (endpoint_id, ext, Jsonb({"payload": json.loads(BODY)}), row[0],
                         Jsonb(trace)))
                latencies.append(time.perf_counter() - start)

        start = time.perf_counter()
        await asyncio.gather(*[worker() for _ in range(concurrency)])
        return time.perf_counter() - start, latencies


def _run(coro: object) -> object:
    """Run the load generator on uvloop when available: the client shares the 2 cores."""
    try:
        import uvloop

        return uvloop.run(coro)  # type: ignore[arg-type]
    except ImportError:
        return asyncio.run(coro)  # type: ignore[arg-type]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--total", type=int, default=3000, help="deliveries per level")
    ap.add_argument("--workers", type=int, default=2,
                    help="Sanic workers (default 2: one per core on the reference machine)")
    ap.add_argument("--levels", default="1,8,32")
    args = ap.parse_args()
    with database() as dsn, tempfile.TemporaryDirectory() as tmp:
        # The same number of PostgreSQL connections as the ceiling's pool at 32 clients.
        config = Path(tmp) / "bench.toml"
        config.write_text("[server]\npool_min_size = 8\npool_max_size = 32\n")
        srv = serve(dsn, Path(tmp), workers=args.workers, config=config)
        try:
            cli(srv.env, "human", "add", "bench")
            ep = cli(srv.env, "endpoint", "vend", "--owner", "bench", "--name", "b",
                     "--queues", "inbox", "--webhook-queues", "inbox",
                     "--source-types", "generic", "--webhook-max", "1")
            hook = cli(srv.env, "webhook", "create", "--endpoint", ep["endpoint_id"],
                       "--source", "generic", "--target-queue", "inbox")
            _run(load(hook["ingest_url"], BODY, 8, 300))  # warm up
            print(f"ingest benchmark: {args.total} deliveries per level, body {len(BODY)} B,"
                  f" {args.workers} Sanic worker(s), no rules")
            print(f"{'clients':>7} | {'receiver/s':>10} {'p50 ms':>7} {'p99 ms':>7} |"
                  f" {'ceiling/s':>9} {'p50 ms':>7} {'p99 ms':>7} | {'ratio':>5}")
            for level in [int(x) for x in args.levels.split(",")]:
                r = summary(*_run(load(hook["ingest_url"], BODY, level, args.total)))
                c = summary(*_run(ceiling(dsn, hook["webhook_id"], ep["endpoint_id"],
                                                 level, args.total)))
                print(f"{level:>7} | {r['per_s']:>10.0f} {r['p50_ms']:>7.2f} {r['p99_ms']:>7.2f} |"
                      f" {c['per_s']:>9.0f} {c['p50_ms']:>7.2f} {c['p99_ms']:>7.2f} |"
                      f" {r['per_s'] / c['per_s']:>5.0%}")
        finally:
            srv.stop()


if __name__ == "__main__":
    main()
