"""Ingest while the retention job prunes: deliveries/s alone vs during a prune, side by side.

Run: python bench/prune.py [--events 100000] [--clients 8] [--workers 1] [--rounds 3]
Seeds N expired events (each with a done todo, as routed deliveries leave them) straight in
SQL (INSERT ... SELECT generate_series), then, on one ``switchboard serve`` whose retention
job runs every 0.5 s: measures live ingest for a while with nothing to prune, then gives
the webhook ``events_days = 30`` (its routing config, as set_webhook_policy would) so the
serve's own job prunes the N events in batches, measures the same ingest until the last one
is gone, and then alone again for as long. Each of ``--rounds`` rounds seeds again; it prints
deliveries/s alone (before, after) and while pruning, p50/p99, the prune's duration and rate,
and the ratio during / the mean of before and after (target: a slowdown under 20 %).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

sys.path.insert(0, str(Path(__file__).parent))
from harness import cli, database, generic_webhook, load, serve, summary  # noqa: E402

BODY = json.dumps({"action": "opened", "number": 7, "title": "bench", "text": "x" * 512}).encode()
TRACE = {"stage": "default", "cause": "no_match_default", "action": {"queue": "inbox"}}
#: Deliveries per load burst: the measurement runs bursts until its window ends.
BURST = 400

SEED = """
WITH ev AS (
    INSERT INTO events (source, kind, external_id, headers, body, content_type, size,
                        verified, trust_mode, webhook_id, routing_trace, disposition,
                        received_at)
    SELECT 'generic', NULL, %(wh)s || ':seed-' || %(round)s::text || '-' || g, '{}'::jsonb,
           %(body)s, 'application/json', %(size)s, false, 'token', %(wh)s::uuid,
           %(trace)s, 'routed', now() - interval '40 days' + g * interval '1 ms'
    FROM generate_series(%(lo)s::int, %(hi)s::int) g
    RETURNING id, external_id
)
INSERT INTO todos (endpoint_id, queue, idempotency_key, title, payload, event_id,
                   routing_trace, state, completed_at)
SELECT %(ep)s::uuid, 'inbox', external_id, 'seed', '{}'::jsonb, id, %(trace)s, 'done', now()
FROM ev
"""


def seed(dsn: str, webhook_id: str, endpoint_id: str, n: int, round_: int) -> float:
    start = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for lo in range(1, n + 1, 20_000):
            conn.execute(
                SEED,
                {
                    "wh": webhook_id,
                    "ep": endpoint_id,
                    "round": round_,
                    "lo": lo,
                    "hi": min(n, lo + 19_999),
                    "body": BODY,
                    "size": len(BODY),
                    "trace": Jsonb(TRACE),
                },
            )
        conn.execute("VACUUM ANALYZE events")
        conn.execute("VACUUM ANALYZE todos")
    return time.perf_counter() - start


def expired(dsn: str, webhook_id: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM events WHERE webhook_id = %s"
            " AND received_at < now() - interval '30 days'",
            (webhook_id,),
        ).fetchone()
        return int(row[0]) if row else 0


def set_days(env: dict[str, str], webhook_id: str, days: int | None, tmp: Path) -> None:
    """The webhook's own retention, through the CLI's rules save (as set_webhook_policy)."""
    doc = {"rules": [], "events_days": days}
    path = tmp / "routing.json"
    path.write_text(json.dumps(doc))
    cli(env, "webhook", "rules", "set", webhook_id, str(path))


async def measure(url: str, clients: int, until: Any) -> dict[str, float]:
    """Bursts of deliveries until ``until()`` says the window is over (at least one)."""
    elapsed, lat = 0.0, []
    while True:
        took, burst = await load(url, BODY, clients, BURST)
        elapsed += took
        lat += burst
        if until(elapsed):
            return summary(elapsed, lat)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=100_000, help="expired events to prune")
    ap.add_argument("--clients", type=int, default=8, help="concurrent keep-alive clients")
    ap.add_argument("--workers", type=int, default=1, help="Sanic workers")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--alone-s", type=float, default=30.0, help="the first round's alone windows, seconds"
    )
    args = ap.parse_args()
    with database() as dsn, tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        config = tmp / "switchboard.toml"
        config.write_text("[retention]\ninterval_s = 0.5\n")  # no events_days: forever
        srv = serve(dsn, tmp / "data", workers=args.workers, config=config)
        try:
            cli(srv.env, "human", "add", "bench")
            hook = generic_webhook(srv.env)
            url, wh = hook["ingest_url"], hook["webhook_id"]
            asyncio.run(load(url, BODY, args.clients, 500))  # warm up
            print(
                f"prune benchmark: {args.events} expired events (each with a done todo) per"
                f" round, {args.clients} clients, {args.workers} Sanic worker(s), batches of"
                " 1000 ([retention] batch_size), the serve's own job every 0.5 s"
            )
            print(
                f"{'round':>5} | {'before':>6} {'after':>6} {'p99 ms':>7} |"
                f" {'pruning/s':>9} {'p50 ms':>7} {'p99 ms':>7} | {'prune s':>7}"
                f" {'events/s':>8} | {'ratio':>6}"
            )
            ratios = []
            window = args.alone_s
            for round_ in range(1, args.rounds + 1):
                seed(dsn, wh, hook["endpoint_id"], args.events, round_)
                # Alone before and after the prune, each as long as the prune took (the
                # previous round's, at first --alone-s): the machine's load drifts, and a
                # window on each side of the prune cancels most of the drift out.
                before = asyncio.run(measure(url, args.clients, lambda e, w=window: e >= w))
                set_days(srv.env, wh, 30, tmp)
                start = time.perf_counter()
                pruning = asyncio.run(measure(url, args.clients, lambda _e: expired(dsn, wh) == 0))
                took = window = time.perf_counter() - start
                set_days(srv.env, wh, None, tmp)
                after = asyncio.run(measure(url, args.clients, lambda e, w=window: e >= w))
                alone = (before["per_s"] + after["per_s"]) / 2
                ratio = pruning["per_s"] / alone
                ratios.append(ratio)
                print(
                    f"{round_:>5} | {before['per_s']:>6.0f} {after['per_s']:>6.0f}"
                    f" {max(before['p99_ms'], after['p99_ms']):>7.1f} | {pruning['per_s']:>9.0f}"
                    f" {pruning['p50_ms']:>7.2f} {pruning['p99_ms']:>7.1f} | {took:>7.1f}"
                    f" {args.events / took:>8.0f} | {ratio:>6.0%}"
                )
            best, worst = max(ratios), min(ratios)
            print(
                f"ingest while pruning / alone: {worst:.0%}–{best:.0%}"
                f" (a slowdown of {1 - best:.0%}–{1 - worst:.0%}; target under 20 %)"
            )
        finally:
            srv.stop()


if __name__ == "__main__":
    main()
