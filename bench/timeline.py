"""Where a delivery's time goes in the worker, plain against routed: its log line's parts.

Run: python bench/timeline.py [--clients C] [--total N] [--rounds K]
Posts routing.py's ~5 KB delivery to its two webhooks (no rules; 32 rules) on one
single-worker `switchboard serve` whose log goes to a file, in K alternating turns of N
deliveries per row at C clients (default 8: the routing criterion's level), then reads each
delivery's line (``route_ms``: its routing stages; ``record_ms``: its write, the group
commit it waited for and its own; ``latency_ms``: arrival to reply) and prints per row the
mean and p50 of each part, the rest of the worker's time (verifying, building the envelope
and the reply), and what the client waited besides (HTTP, the worker's loop, the network):
issue 38's eleventh pass, measured without instrumenting the code.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from harness import database, load, pct, serve, summary  # noqa: E402
from routing import BODY, plain_and_routed  # noqa: E402


def lines_by_webhook(log: Path) -> dict[str, list[dict[str, Any]]]:
    """The delivery lines of the server's log, by webhook id."""
    out: dict[str, list[dict[str, Any]]] = {}
    for text in log.read_text(errors="replace").splitlines():
        if not text.startswith("{"):
            continue
        doc = json.loads(text)
        if doc.get("logger") == "switchboard.delivery" and "route_ms" in doc:
            out.setdefault(str(doc["webhook_id"]), []).append(doc)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--total", type=int, default=2000, help="deliveries per row")
    ap.add_argument("--rounds", type=int, default=4, help="alternating turns per row")
    args = ap.parse_args()
    with database() as dsn, tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "serve.log"
        srv = serve(dsn, Path(tmp), log=log)
        try:
            named = plain_and_routed(srv)
            warm = {w: len(v) for w, v in lines_by_webhook(log).items()}
            client: dict[str, list[float]] = {name: [] for name, _ in named}
            took = {name: 0.0 for name, _ in named}
            for _ in range(args.rounds):
                for name, hook in named:
                    share = args.total // args.rounds
                    elapsed, lat = asyncio.run(load(hook["ingest_url"], BODY, args.clients, share))
                    client[name] += lat
                    took[name] += elapsed
        finally:
            srv.stop()
        by_hook = lines_by_webhook(log)
    print(
        f"timeline: {args.clients} clients, {args.rounds} alternating turns of"
        f" {args.total // args.rounds} deliveries per row, body {len(BODY)} B, 1 Sanic worker"
    )
    print(f"{'µs a delivery':>30} | {'no rules':>17} | {'32 rules':>17}")
    print(f"{'':>30} | {'mean':>8} {'p50':>8} | {'mean':>8} {'p50':>8}")
    parts: dict[str, dict[str, list[float]]] = {}
    for name, hook in named:
        docs = by_hook.get(hook["webhook_id"], [])[warm.get(hook["webhook_id"], 0) :]
        lat = [float(d["latency_ms"]) * 1000 for d in docs]
        route = [float(d["route_ms"]) * 1000 for d in docs]
        record = [float(d.get("record_ms") or 0) * 1000 for d in docs]
        rest = [a - b - c for a, b, c in zip(lat, route, record, strict=True)]
        outside = statistics.fmean(client[name]) * 1e6 - statistics.fmean(lat)
        parts[name] = {
            "routing (route_ms)": route,
            "write (record_ms)": record,
            "the rest in the worker": rest,
            "arrival to reply (latency_ms)": lat,
            "the client waited besides": [outside],
        }
    for label in parts["no rules"]:
        cells = []
        for name, _ in named:
            values = parts[name][label]
            p50 = f"{pct(values, 50):>8.0f}" if len(values) > 1 else f"{'':>8}"
            cells.append(f"{statistics.fmean(values):>8.0f} {p50}")
        print(f"{label:>30} | {cells[0]} | {cells[1]}")
    rates = {name: summary(took[name], client[name])["per_s"] for name, _ in named}
    print(
        f"deliveries/s: {rates['no rules']:.0f} and {rates['32 rules']:.0f};"
        f" routed ÷ plain {rates['32 rules'] / rates['no rules']:.2f}"
    )


if __name__ == "__main__":
    main()
