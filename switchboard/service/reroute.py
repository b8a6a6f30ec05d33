"""Re-route stored deliveries through the current rules: a plan first, then only new todos.

A re-route evaluates the webhook's current version over stored events exactly as a diff
does (the verdict stage, the grant as it is now). Applying it gives an event a todo on
each target the current rules name that has no todo from it yet, whatever that todo's
state; a drop deletes nothing; the event's trace gains one ``reroutes`` entry per version
(the original decision stays where it was). Re-running under the same version creates
nothing. Decisions that claim ``once`` or carry a work order are left to live routing
(reported as ``skipped``). :func:`release_held` is a re-route over ``held`` deliveries
(``on_fault = "hold"``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections import Counter
from typing import Any, cast

from ..contract.sinks import SinkEvent, SinkTodo
from ..errors import InvalidArgument, ServiceError
from ..pgtext import clean_json
from ..routing.decide import decide
from ..routing.model import DISPOSITION_DROPPED, DISPOSITION_HELD, DISPOSITION_ROUTED
from ..routing.replay import stored_envelope
from ..routing.route import config_of
from ..routing.verdicts import VerdictStage, match_of, verdict_stage
from ..runtime import Runtime
from ..store import Row
from .common import jsonable
from .history import DEFAULT_LAST, _webhook, decision_view
from .ingest import _run_sinks, todo_payload, todo_title
from .replay import Clock, Progress, count_window, evaluated, window_of
from .versions import author_of


def _stage(rt: Runtime) -> VerdictStage:
    """The stage that reports rule verdicts (re-routing applies the rules' current version)."""
    stage = verdict_stage(rt.stages)
    if stage is None:
        raise ServiceError(
            "no enabled routing stage reports rule verdicts (the rules plugin is disabled)",
            code="unavailable",
        )
    return stage


#: Planned or re-routed events listed per call at most.
LIST_MAX = 100


def _stored_queue(row: Row) -> str | None:
    action = (row.get("routing_trace") or {}).get("action") or {}
    queue = action.get("queue") if isinstance(action, dict) else None
    return queue if isinstance(queue, str) else None


async def reroute_events(
    rt: Runtime,
    caller: Row | None,
    webhook_id: str,
    *,
    last: Any = None,
    since: Any = None,
    cursor: Any = None,
    plan: Any = True,
    progress: Progress | None = None,
    held_only: bool = False,
) -> dict[str, Any]:
    """Plan (``plan`` True: saves nothing) or apply the current version over the window
    (``held_only``: only its held deliveries, :func:`release_held`).

    A decision the current config would hold again (it still faults, ``on_fault = "hold"``)
    is left as it is (``still_held``).

    Per call at most the stage's ``history_max_events`` events, within its deadline;
    ``next_cursor`` goes on (``stopped`` says why it stopped).
    """
    if not isinstance(plan, bool):
        raise InvalidArgument("plan: true (show what would change) or false (apply it)")
    stage = _stage(rt)
    row, resolved, grant = await _webhook(rt, caller, webhook_id)
    hook = str(row["id"])
    config = config_of(row)
    version = await rt.store.current_version(hook)
    window = window_of(last, since, cursor, default_last=DEFAULT_LAST)
    cap = stage.history_max_events
    total = await count_window(rt, hook, window, cap) if progress is not None else None
    clock = Clock(stage.history_deadline_s, progress, total)
    by = author_of(caller)
    taken, changed, skipped, stopped, last_row = 0, 0, 0, None, None
    still_held = 0
    todos: Counter[str] = Counter()
    queues: Counter[str] = Counter()
    listed: list[dict[str, Any]] = []
    batch: list[tuple[Row, Any]] = []

    async def settle() -> None:
        nonlocal changed, skipped, still_held
        state = await rt.store.reroute_state([str(r["id"]) for r, _ in batch])
        for event, decision in batch:
            had = state.get(str(event["id"]))
            if had is None or (held_only and had["disposition"] != DISPOSITION_HELD):
                continue
            if config.holds(decision.trace):
                still_held += had["disposition"] == DISPOSITION_HELD
                continue
            was_held = had["disposition"] == DISPOSITION_HELD
            have = set(had["endpoints"])
            new = [] if decision.drop else [e for e in decision.endpoints if e not in have]
            moved = (
                was_held
                or (decision.drop != (had["disposition"] == "dropped"))
                or (not decision.drop and decision.queue != _stored_queue(had))
            )
            if not (new or moved):
                continue
            if new and (decision.once or decision.work_order):
                skipped += 1
                continue
            changed += 1
            item: dict[str, Any] = {
                "event_id": str(event["id"]),
                "received_at": jsonable(event["received_at"]),
                "stored": {
                    "disposition": had["disposition"],
                    "queue": _stored_queue(had),
                    "endpoints": sorted(have),
                },
                "decision": decision_view(decision),
                "create": new,
            }
            if not plan:
                created = await _apply(rt, hook, event, had, decision, new, version, by)
                item["created"] = [t["id"] for t in created]
                new = [t["endpoint_id"] for t in created]
            todos.update(new)
            if new and decision.queue is not None:
                queues[decision.queue] += len(new)
            if len(listed) < LIST_MAX:
                listed.append(item)
        batch.clear()

    stream = evaluated(rt, stage, resolved, (config,), window, limit=cap)
    async with contextlib.aclosing(stream) as events:
        async for found in events:
            batch.append((found.row, decide(config, match_of(config, found.verdicts[0]), grant)))
            taken += 1
            last_row = found.row
            if len(batch) >= 256:
                await settle()
            await clock.tick(taken)
            if clock.expired():
                stopped = "deadline"
                break
    if batch:
        await settle()
    if (
        stopped is None
        and last_row is not None
        and taken >= cap
        and (window.remaining is None or taken < window.remaining)
    ):
        stopped = "max_events"
    await clock.tick(taken, force=True)
    key = "todos_planned" if plan else "todos_created"
    out: dict[str, Any] = {
        "webhook_id": hook,
        "version": version,
        "plan": plan,
        "evaluated": taken,
        "changed": changed,
        "skipped": skipped,
        "still_held": still_held,
        key: sum(todos.values()),
        "by_endpoint": dict(todos),
        "by_queue": dict(queues),
        "events": listed,
    }
    if stopped is not None and last_row is not None:
        out["next_cursor"] = window.cursor(last_row, taken)
        out["stopped"] = stopped
    return out


async def _apply(
    rt: Runtime,
    hook: str,
    event: Row,
    had: Row,
    decision: Any,
    new: list[str],
    version: int,
    by: str,
) -> list[Row]:
    envelope = stored_envelope(rt.registries.projections, event, hook)
    trace = clean_json(decision.trace)
    entry = {
        "version": version,
        "by": by,
        "at": dt.datetime.now(dt.UTC).isoformat(),
        "action": trace.get("action"),
        "stage": trace.get("stage"),
        "rule_id": trace.get("rule_id"),
        "endpoints": list(decision.endpoints),
    }
    payload = todo_payload(envelope, {"webhook_id": hook, "external_id": had["external_id"]})
    rows = [
        {
            "endpoint_id": endpoint,
            "queue": decision.queue,
            "idempotency_key": had["external_id"],
            "title": todo_title(envelope, rt.registries.projections),
            "payload": clean_json(jsonable(payload)),
            "routing_trace": {**trace, "reroute": {"version": version, "by": by}},
        }
        for endpoint in new
    ]
    if had["disposition"] == DISPOSITION_HELD:
        disposition: str | None = DISPOSITION_DROPPED if decision.drop else DISPOSITION_ROUTED
    else:
        disposition = DISPOSITION_ROUTED if new else None
    created = await rt.store.apply_reroute(
        str(event["id"]), todos=rows, entry=entry, version=version, disposition=disposition
    )
    if created:
        sink_event = {
            "id": str(event["id"]),
            "webhook_id": hook,
            "source": event["source"],
            "kind": event.get("kind"),
            "external_id": had["external_id"],
            "headers": event.get("headers") or {},
            "raw_headers": b"",
            "body": bytes(event["body"]),
            "content_type": event.get("content_type"),
            "size": len(bytes(event["body"])),
            "verified": event["verified"],
            "trust_mode": event["trust_mode"],
            "verify_detail": None,
            "routing_trace": had["routing_trace"],
            "disposition": "routed",
        }
        _run_sinks(
            rt,
            cast(SinkEvent, sink_event),
            [
                SinkTodo(id=t["id"], endpoint_id=t["endpoint_id"], queue=t["queue"], created=True)
                for t in created
            ],
        )
    return created


async def release_held(
    rt: Runtime,
    caller: Row | None,
    webhook_id: str,
    *,
    last: Any = None,
    since: Any = None,
    cursor: Any = None,
    plan: Any = True,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Re-route the window's ``held`` deliveries through the current rules: each goes where
    they say now (``routed`` with its todos, or ``dropped``), once."""
    return await reroute_events(
        rt,
        caller,
        webhook_id,
        last=last,
        since=since,
        cursor=cursor,
        plan=plan,
        progress=progress,
        held_only=True,
    )


__all__ = ["release_held", "reroute_events"]
