"""What a slow model costs the producer with the deferred llm stage: nothing it waits for.

Run: python bench/deferred.py [--burst N] [--rounds K] [--delay S] [--in-flight M]
One `switchboard serve` (1 worker) with ``[plugins.llm] mode = "deferred"`` and the test
suite's fake OpenAI-compatible server (tests/support/fakeai.py) answering after S seconds
(default 8, the issue's figure). Two webhooks of one human: one whose endpoint opted into
triage, one without. Each round sends a burst of N deliveries at once (N connections) to
each, alternating; prints each one's 202 latency p50/p99, the p99 ratio triaged to plain
(issue 35's target: <= 1.5), then waits until every triaged delivery is decided and
prints how long that took, how many were decided once with a todo, and the most model
calls the fake saw open at once (never over M, the worker's ``max_in_flight``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

import psycopg

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "support"))
from fakeai import FakeAI  # noqa: E402
from harness import cli, database, generic_webhook, load, serve, summary  # noqa: E402

ANSWER = {"queue": "triage", "confidence": 0.92, "reason": "a crash report"}
BODY = json.dumps({"title": "Crash on start", "kind": "bug", "detail": "x" * 512}).encode()


def config(fake: FakeAI, in_flight: int, delay: float) -> str:
    timeout_ms = int(delay * 1000) + 5000
    return (
        "[plugins.llm]\n"
        'mode = "deferred"\n'
        f"max_in_flight = {in_flight}\n"
        f"max_timeout_ms = {timeout_ms}\n"
        "max_prompt_budget_per_minute = 100000\n"
        "max_prompt_budget_per_day = 10000000\n"
        "[[plugins.llm.providers]]\n"
        'type = "openai"\n'
        'name = "fake"\n'
        f'base_url = "{fake.base_url}"\n'
        f"max_in_flight = {in_flight}\n"
    )


def undecided(dsn: str, webhook_id: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM events WHERE webhook_id = %s AND disposition = 'pending'",
            (webhook_id,),
        ).fetchone()
    return int(row[0]) if row else 0


def decided(dsn: str, webhook_id: str) -> tuple[dict[str, int], int]:
    """(events per deciding stage or fallback cause, todos of them all)."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT coalesce(e.routing_trace->>'cause', e.routing_trace->>'stage'),"
            " count(DISTINCT e.id), count(t.id) FROM events e"
            " LEFT JOIN todos t ON t.event_id = e.id WHERE e.webhook_id = %s GROUP BY 1",
            (webhook_id,),
        ).fetchall()
        faults = conn.execute(
            "SELECT DISTINCT f->>'stage', f->>'cause', f->>'detail' FROM events e,"
            " jsonb_array_elements(e.routing_trace->'faults') f WHERE e.webhook_id = %s",
            (webhook_id,),
        ).fetchall()
    for fault in faults:  # what went wrong, if anything did
        print("fault:", *fault)
    return {str(r[0]): int(r[1]) for r in rows}, sum(int(r[2]) for r in rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--burst", type=int, default=50, help="deliveries sent at once")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--delay", type=float, default=8.0, help="the model's answer time, s")
    ap.add_argument("--in-flight", type=int, default=20, help="[plugins.llm] max_in_flight")
    args = ap.parse_args()
    fake = FakeAI().start()
    model = fake.on("bench-slow", ANSWER, delay=args.delay)
    try:
        with database() as dsn, tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            cfg = root / "sb.toml"
            cfg.write_text(config(fake, args.in_flight, args.delay))
            srv = serve(dsn, root / "data", workers=1, config=cfg)
            try:
                cli(srv.env, "human", "add", "bench")
                hooks = {}
                for name in ("triaged", "plain"):
                    hooks[name] = generic_webhook(srv.env, name, "inbox,triage")
                    if name == "triaged":
                        doc = root / "triage.json"
                        doc.write_text(
                            json.dumps(
                                {
                                    "provider": "fake",
                                    "model": model,
                                    "queues": [{"name": "triage", "description": "bugs"}],
                                    "min_confidence": 0.5,
                                    "timeout_ms": int(args.delay * 1000) + 4000,
                                    "prompt_budget_per_minute": 100000,
                                    "prompt_budget_per_day": 10000000,
                                }
                            )
                        )
                        cli(srv.env, "llm", "set", "--endpoint", hooks[name]["endpoint_id"],
                            "--file", str(doc))  # fmt: skip
                urls = {name: hook["ingest_url"] for name, hook in hooks.items()}
                asyncio.run(load(urls["plain"], BODY, 4, 50))  # warm up
                lat: dict[str, list[float]] = {name: [] for name in urls}
                elapsed = dict.fromkeys(urls, 0.0)
                started = time.monotonic()
                for _ in range(args.rounds):
                    for name in ("plain", "triaged"):
                        took, got = asyncio.run(load(urls[name], BODY, args.burst, args.burst))
                        elapsed[name] += took
                        lat[name].extend(got)
                acked = time.monotonic() - started
                webhook_id = hooks["triaged"]["webhook_id"]
                total = args.burst * args.rounds
                deadline = time.monotonic() + total / args.in_flight * (args.delay + 2) + 60
                while undecided(dsn, webhook_id) and time.monotonic() < deadline:
                    time.sleep(0.5)
                took_all = time.monotonic() - started
                left = undecided(dsn, webhook_id)
                events, todos = decided(dsn, webhook_id)
            finally:
                srv.stop()
        rows = {name: summary(elapsed[name], lat[name]) for name in lat}
        print(
            f"deferred benchmark: {args.rounds} rounds of {args.burst} deliveries at once per"
            f" webhook, model answering after {args.delay:g} s, max_in_flight {args.in_flight}"
        )
        for name in ("plain", "triaged"):
            s = rows[name]
            print(f"{name:>8} | 202 p50 {s['p50_ms']:7.2f} ms  p99 {s['p99_ms']:7.2f} ms")
        ratio = rows["triaged"]["p99_ms"] / rows["plain"]["p99_ms"]
        print(f"202 p99 triaged / plain: {ratio:.3f} (target <= 1.5)")
        print(
            f"all {2 * total} acknowledged in {acked:.1f} s; the {total} triaged decided in"
            f" {took_all:.1f} s ({left} still pending): {events}, {todos} todos;"
            f" peak model calls open at once {fake.peak(model)} (cap {args.in_flight})"
        )
    finally:
        fake.stop()


if __name__ == "__main__":
    main()
