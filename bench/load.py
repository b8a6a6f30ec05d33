"""Group commit under load: deliveries with duplicates at 32 clients, checked in the database.

Run: python bench/load.py [--total N (10000)] [--dups 0.10] [--clients 32] [--workers 2]
       [--batch-max 256] [--writes-in-flight 1]
Sends N distinct deliveries to a generic webhook with two targets, plus a share of them
again (half right behind the original, so concurrently, half later), then prints
deliveries/s, p50/p99, what was lost or duplicated (events and todos counted in
PostgreSQL, every answer checked) and the write batch sizes from /metrics.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).parent))
from harness import batch_line, cli, database, load_ids, pct, scrape_histogram, serve  # noqa: E402

TEXT = "x" * 512


def body(did: str) -> bytes:
    return b'{"action": "opened", "id": "%s", "text": "%s"}' % (did.encode(), TEXT.encode())


def plan(total: int, dups: float, seed: int = 13) -> list[str]:
    """Every id once in order; a ``dups`` share again, half adjacent to it, half later."""
    rng = random.Random(seed)
    order: list[str] = []
    later: list[tuple[int, str]] = []
    for i in rng.sample(range(total), int(total * dups)):
        later.append((i, f"d{i}"))
    again = dict(later)
    for i in range(total):
        order.append(f"d{i}")
        if i in again and rng.random() < 0.5:
            order.append(again.pop(i))
    for i, did in sorted(again.items()):
        order.insert(rng.randrange(i + 1, len(order) + 1), did)
    return order


def check(
    answers: list[tuple[str, int, dict[str, Any], float]], targets: list[str]
) -> dict[str, int]:
    """What the answers say: errors, and ids whose answers disagree with one delivery."""
    by_id: dict[str, list[dict[str, Any]]] = defaultdict(list)
    errors = 0
    for did, status, doc, _ in answers:
        if status != 202:
            errors += 1
        else:
            by_id[did].append(doc)
    wrong = 0
    for docs in by_id.values():
        made = [d for d in docs if d["created"]]
        ok = len(made) == 1 and [t["endpoint_id"] for t in made[0]["todos"]] == targets
        ids = sorted(t["id"] for t in made[0]["todos"]) if made else []
        ok = ok and all(
            sorted(t["id"] for t in d["todos"]) == ids and d["created"] == 0
            for d in docs
            if d is not made[0]
        )
        wrong += not ok
    return {"non_202": errors, "wrong_answers": wrong}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--total", type=int, default=10_000, help="distinct deliveries")
    ap.add_argument("--dups", type=float, default=0.10, help="share sent twice")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument(
        "--workers",
        type=int,
        default=2,
        help="Sanic workers (default 2: one per core on the reference machine)",
    )
    ap.add_argument(
        "--batch-max",
        type=int,
        default=None,
        help="[ingest] batch_max (default: the server's, 256)",
    )
    ap.add_argument(
        "--writes-in-flight",
        type=int,
        default=None,
        help="[ingest] writes_in_flight (default: the server's, 1)",
    )
    args = ap.parse_args()
    with database() as dsn, tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "bench.toml"
        ingest = {"batch_max": args.batch_max, "writes_in_flight": args.writes_in_flight}
        config.write_text(
            "[ingest]\n" + "".join(f"{k} = {v}\n" for k, v in ingest.items() if v is not None)
        )
        srv = serve(dsn, Path(tmp), workers=args.workers, config=config)
        try:
            cli(srv.env, "human", "add", "bench")
            eps = [
                cli(
                    srv.env,
                    "endpoint",
                    "vend",
                    "--owner",
                    "bench",
                    "--name",
                    name,
                    "--queues",
                    "inbox",
                    "--webhook-queues",
                    "inbox",
                    "--source-types",
                    "generic",
                    "--webhook-max",
                    "1",
                )["endpoint_id"]
                for name in ("a", "b")
            ]
            hook = cli(
                srv.env,
                "webhook",
                "create",
                "--endpoint",
                eps[0],
                "--source",
                "generic",
                "--target-queue",
                "inbox",
            )
            cli(srv.env, "webhook", "route", "add", hook["webhook_id"], eps[1])
            ids = plan(args.total, args.dups)
            elapsed, answers = asyncio.run(load_ids(hook["ingest_url"], ids, args.clients, body))
            batches = scrape_histogram(srv.base_url)
        finally:
            srv.stop()
        with psycopg.connect(dsn) as conn:
            events, distinct = conn.execute(
                "SELECT count(*), count(DISTINCT external_id) FROM events WHERE webhook_id = %s",
                (hook["webhook_id"],),
            ).fetchone() or (0, 0)
            todos, keys = conn.execute(
                "SELECT count(*), count(DISTINCT (endpoint_id, idempotency_key)) FROM todos"
                " WHERE endpoint_id = ANY(%s::uuid[])",
                (eps,),
            ).fetchone() or (0, 0)
    lat = [a[3] for a in answers]
    print(
        f"load: {args.total} deliveries + {len(ids) - args.total} duplicates, {args.clients}"
        f" clients, {args.workers} worker(s), batch_max {args.batch_max or 'default'},"
        f" writes_in_flight {args.writes_in_flight or 'default'},"
        " 2 targets"
    )
    print(
        f"  {len(answers) / elapsed:.0f} deliveries/s, p50 {pct(lat, 50) * 1000:.1f} ms,"
        f" p99 {pct(lat, 99) * 1000:.1f} ms ({elapsed:.1f} s)"
    )
    print(
        f"  lost: {args.total - distinct} events, {2 * args.total - keys} todos;"
        f" duplicated: {events - distinct} events, {todos - keys} todos;"
        f" answers: {check(answers, eps)}"
    )
    # Histogram bucket bounds; "no batches" from a server without group commit.
    print(f"  {batch_line(batches, 'write')} for {len(answers)} deliveries")


if __name__ == "__main__":
    main()
