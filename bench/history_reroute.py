"""bench/history.py's re-route modes: an apply that really writes, and live ingest beside one.

``reroute``: the stored deliveries went to ``inbox`` (no rule matched); the new version sends
every one to ``review`` for a second endpoint too, so applying the re-route writes a todo and
a ``reroutes`` entry per event. Prints the plan's and the apply's events/s.

``ingest``: live deliveries to another webhook of the same owner (its rules share the owner's
sandbox share with the re-route) at ``--concurrency``, first alone for as long as the
re-route will take, then side by side with an applying re-route of every stored event.
Prints both ingest rates and the slowdown ratio, and the re-route's events/s beside ingest.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from typing import Any

from harness import RULES

#: The last rule of the bench's 32 replaced by one every event matches (32 is the cap).
MOVE = {"id": "all", "expr": "true", "action": {"queue": "review", "endpoints": []}}


async def second_target(rt: Any, wid: str) -> str:
    """A second endpoint of the bench's human, draining ``review``, routed from the webhook."""
    from switchboard.service import identity, webhooks

    made = await identity.vend_endpoint(rt, owner="bench", name="reviewer", queues=["review"])
    reviewer = str(made["endpoint_id"])
    await webhooks.add_route(rt, None, wid, reviewer)
    return reviewer


def moving(reviewer: str) -> list[dict[str, Any]]:
    rules = json.loads(json.dumps(RULES))[:-1]
    return [*rules, {**MOVE, "action": {"queue": "review", "endpoints": [reviewer]}}]


async def timed_reroute(rt: Any, wid: str, events: int, plan: bool) -> tuple[dict[str, Any], float]:
    from switchboard.service import reroute

    began = time.monotonic()
    doc = await reroute.reroute_events(rt, None, wid, last=events, plan=plan)
    return doc, time.monotonic() - began


def line(label: str, doc: dict[str, Any], took: float) -> str:
    made = doc.get("todos_planned", doc.get("todos_created"))
    return (
        f"{label}: {doc['evaluated']} events in {took:.2f} s ="
        f" {doc['evaluated'] / took:,.0f} events/s, changed {doc['changed']}, todos {made}"
    )


async def reroute_mode(rt: Any, wid: str, events: int) -> None:
    from switchboard.service import rules

    reviewer = await second_target(rt, wid)
    await rules.set_rules(rt, None, wid, moving(reviewer))
    doc, took = await timed_reroute(rt, wid, events, plan=True)
    print(line("reroute plan (every event moves)", doc, took))
    doc, took = await timed_reroute(rt, wid, events, plan=False)
    print(line("reroute apply (writes a todo per event)", doc, took))
    assert doc["todos_created"] == doc["evaluated"], doc["todos_created"]
    doc, took = await timed_reroute(rt, wid, events, plan=False)
    print(line("reroute apply again (idempotent: nothing to write)", doc, took))


async def _ingest_for(
    rt: Any, token: str, body: Any, seconds: float | None, stop: asyncio.Event | None, tasks: int
) -> tuple[int, float]:
    """Live deliveries at ``tasks`` at once, for ``seconds`` or until ``stop``: (count, s)."""
    from switchboard.service.ingest import ingest
    from switchboard.sources import Headers

    ids = itertools.count()
    done = 0
    began = time.monotonic()

    def over() -> bool:
        if stop is not None:
            return stop.is_set()
        return seconds is not None and time.monotonic() - began >= seconds

    async def one() -> None:
        nonlocal done
        while not over():
            n = next(ids)
            headers = Headers({"X-Delivery-Id": f"live-{token[:6]}-{time.time_ns()}-{n}"})
            reply = await ingest(rt, token, headers, body(n), "application/json")
            assert reply.status == 202, reply.body
            done += 1

    await asyncio.gather(*(one() for _ in range(tasks)))
    return done, time.monotonic() - began


async def ingest_mode(rt: Any, owner: Any, wid: str, events: int, body: Any, tasks: int) -> None:
    from switchboard.service import rules, webhooks

    reviewer = await second_target(rt, wid)
    live = await webhooks.create_webhook(rt, owner, "generic", "inbox")
    token = live["ingest_url"].rsplit("/", 1)[1]
    await rules.set_rules(rt, None, live["webhook_id"], RULES)
    await rules.set_rules(rt, None, wid, moving(reviewer))
    # how long the re-route takes, to ingest alone as long (a plan: it writes nothing)
    _doc, estimate = await timed_reroute(rt, wid, events, plan=True)
    await _ingest_for(rt, token, body, 2.0, None, tasks)  # warm
    alone, alone_s = await _ingest_for(rt, token, body, max(estimate, 5.0), None, tasks)
    alone_rate = alone / alone_s
    print(f"ingest alone: {alone} deliveries in {alone_s:.2f} s = {alone_rate:,.0f}/s")
    stop = asyncio.Event()

    async def applying() -> tuple[dict[str, Any], float]:
        try:
            return await timed_reroute(rt, wid, events, plan=False)
        finally:
            stop.set()

    (doc, took), (beside, beside_s) = await asyncio.gather(
        applying(), _ingest_for(rt, token, body, None, stop, tasks)
    )
    beside_rate = beside / beside_s
    print(line("reroute apply beside live ingest", doc, took))
    print(
        f"ingest beside the re-route: {beside} deliveries in {beside_s:.2f} s = {beside_rate:,.0f}/s"
    )
    print(
        f"ingest slowdown: {1 - beside_rate / alone_rate:.1%}"
        f" (beside/alone = {beside_rate / alone_rate:.3f}; the issue asks for <= 20 %)"
    )
