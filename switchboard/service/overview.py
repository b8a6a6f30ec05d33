"""An owner's overview: deliveries per hour by outcome, waiting deliveries, the caller's
queues with their todos, and the envelope a stored delivery's rules saw."""

from __future__ import annotations

import datetime as dt
from typing import Any

from ..errors import InvalidArgument, NotFound
from ..routing.replay import stored_envelope
from ..runtime import Runtime
from ..store import Row
from .common import clip, jsonable
from .todos import todo_view
from .webhooks import owned_webhook

#: The outcomes of :func:`hourly`, in the order a chart stacks them.
OUTCOMES = ("routed", "default", "dropped", "faulted")
HOURS_MAX = 24 * 14
TODOS_MAX = 200


def _age_s(when: Any, now: dt.datetime) -> float | None:
    return None if when is None else max(0.0, (now - when).total_seconds())


async def hourly(
    rt: Runtime, caller: Row | None, webhook_id: str, *, hours: int = 24, now: dt.datetime
) -> list[dict[str, int]]:
    """``hours`` buckets, oldest first, each counting the deliveries received in that hour
    by outcome: one aggregate query, the buckets computed by the database."""
    if isinstance(hours, bool) or not isinstance(hours, int) or not 1 <= hours <= HOURS_MAX:
        raise InvalidArgument(f"hours: must be an integer from 1 to {HOURS_MAX}")
    hook = await owned_webhook(rt, caller, webhook_id)
    out = [dict.fromkeys(OUTCOMES, 0) for _ in range(hours)]
    for row in await rt.store.hourly_outcomes(str(hook["id"]), now, hours):
        age = int(row["age"])
        if 0 <= age < hours:
            out[hours - 1 - age][str(row["outcome"])] += int(row["n"])
    return out


async def waiting(
    rt: Runtime, caller: Row | None, webhook_id: str, *, now: dt.datetime
) -> dict[str, dict[str, Any]]:
    """The webhook's deliveries that wait, per disposition (``pending``: a deferred stage
    has not answered; ``held``: a fault held it): how many, and the oldest one's age."""
    hook = await owned_webhook(rt, caller, webhook_id)
    found = await rt.store.disposition_counts(str(hook["id"]))
    return {
        name: {
            "count": int(found[name]["n"]) if name in found else 0,
            "oldest_age_s": _age_s(found[name]["oldest"], now) if name in found else None,
        }
        for name in ("pending", "held")
    }


async def queues(rt: Runtime, caller: Row, *, now: dt.datetime) -> list[dict[str, Any]]:
    """Each queue the endpoint drains: its pending, claimed and dead todos and how long the
    oldest pending one has waited."""
    rows = await rt.store.queue_counts(str(caller["id"]), list(caller["scope_queues"]))
    return [
        {
            "queue": r["queue"],
            "pending": r["pending"],
            "claimed": r["claimed"],
            "dead": r["dead"],
            "oldest_pending_age_s": _age_s(r["oldest_pending"], now),
        }
        for r in rows
    ]


async def queue_todos(
    rt: Runtime, caller: Row, queue: str, *, limit: int = 100
) -> list[dict[str, Any]]:
    """The queue's pending, claimed and dead todos (dead first), each with its webhook."""
    if queue not in list(caller["scope_queues"]):
        raise NotFound(f"queue {clip(queue)} not found")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= TODOS_MAX:
        raise InvalidArgument(f"limit: must be an integer from 1 to {TODOS_MAX}")
    rows = await rt.store.queue_todos(str(caller["id"]), queue, limit)
    return [
        {**todo_view(r, full=False), "webhook_id": jsonable(r["webhook_id"]), "owner": r["owner"]}
        for r in rows
    ]


async def envelope(rt: Runtime, caller: Row | None, event_id: str) -> dict[str, Any]:
    """The envelope the stored delivery's rules saw: its sanitized headers (as stored) and
    payload, rebuilt as a dry run rebuilds it."""
    event = await rt.store.get_event(event_id)
    hook_id = None if event is None else event.get("webhook_id")
    if event is None or not hook_id:
        raise NotFound(f"event {clip(event_id)} not found")
    try:
        hook = await owned_webhook(rt, caller, str(hook_id))
    except NotFound:
        raise NotFound(f"event {clip(event_id)} not found") from None
    return dict(jsonable(dict(stored_envelope(rt.registries.projections, event, hook["id"]))))


async def todo_titles(
    rt: Runtime, caller: Row | None, webhook_id: str, event_ids: list[str]
) -> dict[str, list[dict[str, Any]]]:
    """Per event id (of the webhook's): the todos it made, title, queue and state."""
    hook = await owned_webhook(rt, caller, webhook_id)
    out: dict[str, list[dict[str, Any]]] = {}
    for row in await rt.store.todos_of_events(str(hook["id"]), event_ids):
        out.setdefault(row["event_id"], []).append(
            {"title": row["title"], "queue": row["queue"], "state": row["state"]}
        )
    return out
