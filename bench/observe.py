"""What observing a delivery costs: its counters, and its log line as JSON or text.

Run: python bench/observe.py [--n N]
Times ``observe_delivery`` (service/observe.py) in process for a routed delivery: the
metrics alone (log level warning), then with its INFO line through the JSON and the text
formatter and the hygiene filter, as ``serve`` logs it (to memory, not a terminal).
Compare with a delivery's whole CPU cost from bench/routing.py (no rules, 1 client).
"""

from __future__ import annotations

import argparse
import io
import logging
import time

from switchboard import loghygiene, logsetup
from switchboard.service.observe import Observation, observe_delivery

TRACE = {"stage": "rule", "cause": "rule_match", "rule_id": "r1", "action": {"queue": "inbox"}}


def one() -> None:
    d = Observation(
        started=time.monotonic(),
        source="github",
        webhook_id="4b1f5e3a-1111-2222-3333-444455556666",
        status=202,
        kind="issues",
        event_id="9c1f5e3a-1111-2222-3333-444455556666",
        disposition="routed",
        trace=TRACE,
        todos_created=1,
    )
    observe_delivery(d, time.monotonic())


def per_call(n: int) -> float:
    for _ in range(n // 10):
        one()
    started = time.perf_counter()
    for _ in range(n):
        one()
    return (time.perf_counter() - started) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20000)
    n = parser.parse_args().n
    root = logging.getLogger()
    handler = logging.StreamHandler(io.StringIO())
    handler.addFilter(loghygiene.HygieneFilter())
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    quiet = per_call(n)
    print(f"metrics only (level warning): {quiet:6.1f} us a delivery")
    root.setLevel(logging.INFO)
    for name, formatter in (("json", logsetup.JsonFormatter()), ("text", logsetup.TextFormatter())):
        handler.setFormatter(formatter)
        cost = per_call(n)
        print(
            f"metrics + {name} line at info:  {cost:6.1f} us a delivery "
            f"({cost / quiet:.1f}x metrics only)"
        )


if __name__ == "__main__":
    main()
