"""Re-route stored deliveries through the current rules: a plan first, then only new todos.

A re-route decides exactly as ``diff_webhook_rules`` does (``service.history``'s replay:
every enabled stage in order, a stored stage's verdict (llm) read from the event's trace,
any other stage re-run, under the grant as it is now), with the webhook's current version
as the candidate: its ``totals`` and ``candidate_hash`` are that diff's candidate side.
Applying it gives an event a todo on each target the current rules name that has no todo
from it yet, whatever that todo's state; a drop deletes nothing; the event's trace gains
one ``reroutes`` entry per version (the original decision stays where it was). Re-running
under the same version creates nothing. A ``once`` decision takes its claim as live routing
does (or meets the ``repeat``), a work order rides on the todos. A ``pending`` delivery
(its deferred stage has not decided yet) is never re-routed: its stage routes it.
:func:`release_held` is a re-route over ``held`` deliveries (``on_fault = "hold"``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from typing import Any

from ..errors import Conflict, InvalidArgument, NotFound, ServiceError
from ..routing.model import (
    DISPOSITION_HELD,
    DISPOSITION_PENDING,
    DISPOSITIONS,
    Decision,
)
from ..routing.route import config_of
from ..routing.verdicts import verdict_stage
from ..routing.workorder import ONCE_REPEAT
from ..runtime import Runtime
from ..store import Row
from ..store.db import is_uuid
from . import liveload
from .common import clip, jsonable
from .history import _Replay, _Totals, _webhook, decision_view
from .replay import Clock, Only, Progress, call_window, count_window, evaluated
from .reroute_apply import Taken, prepared
from .rules import expected_version
from .sinkrun import ring_sinks_many
from .versions import author_of, config_hash


def _stage(rt: Runtime) -> None:
    """Re-routing applies the rules' current version: the rules stage must be there."""
    if verdict_stage(rt.stages) is None:
        raise ServiceError(
            "no enabled routing stage reports rule verdicts (the rules plugin is disabled)",
            code="unavailable",
        )


#: Planned or re-routed events listed per call at most (then ``changes_cursor``).
LIST_MAX = 100
#: ``event_ids`` given at most.
EVENT_IDS_MAX = 1000
#: Events settled (their todos read, then applied) at a time.
SETTLE = 256


def _stored_queue(row: Row) -> str | None:
    action = (row.get("routing_trace") or {}).get("action") or {}
    queue = action.get("queue") if isinstance(action, dict) else None
    return queue if isinstance(queue, str) else None


def _only(event_ids: Any, disposition: Any, held_only: bool) -> Only:
    """The filters (``history_page``'s keywords), each checked naming its argument."""
    only: Only = {}
    if held_only:
        if disposition not in (None, DISPOSITION_HELD):
            raise InvalidArgument("disposition: release_held_events releases held events only")
        disposition = DISPOSITION_HELD
    if disposition is not None:
        if disposition not in DISPOSITIONS:
            raise InvalidArgument(
                f"disposition: one of {', '.join(DISPOSITIONS)} (got {disposition!r})"
            )
        if disposition == DISPOSITION_PENDING:
            raise InvalidArgument(
                "disposition: pending events are never re-routed (their deferred stage"
                " decides them)"
            )
        only["disposition"] = disposition
    if event_ids is not None:
        if (
            not isinstance(event_ids, list)
            or not event_ids
            or len(event_ids) > EVENT_IDS_MAX
            or not all(isinstance(e, str) and is_uuid(e) for e in event_ids)
        ):
            raise InvalidArgument(
                f"event_ids: a list of 1 to {EVENT_IDS_MAX} event ids (UUIDs) of this webhook"
            )
        only["event_ids"] = sorted(set(event_ids))
    return only


async def reroute_events(
    rt: Runtime,
    caller: Row | None,
    webhook_id: str,
    *,
    last: Any = None,
    since: Any = None,
    cursor: Any = None,
    changes_cursor: Any = None,
    event_ids: Any = None,
    disposition: Any = None,
    plan: Any = True,
    progress: Progress | None = None,
    held_only: bool = False,
    page: int = LIST_MAX,
    expect_version: Any = None,
) -> dict[str, Any]:
    """Plan (``plan`` True: saves nothing) or apply the current version over the window
    (``event_ids`` and ``disposition`` keep only those of its events; ``held_only``: only
    its held deliveries, :func:`release_held`).

    ``evaluated`` and ``totals`` cover every event evaluated, as a diff's candidate side
    does; ``changed`` counts the events that gain a todo or change disposition; ``events``
    lists the first ``page`` of them and ``changes_cursor`` (a plan's) lists the next ones
    (that call answers ``events`` alone; pass the same filters). A decision the current
    config would hold again (it still faults, ``on_fault = "hold"``) is left as it is
    (``still_held``); a pending delivery is left to its stage (``pending``).

    Per call at most the stage's ``history_max_events`` events, within its deadline;
    ``next_cursor`` goes on (``stopped`` says why it stopped).
    """
    if not isinstance(plan, bool):
        raise InvalidArgument("plan: true (show what would change) or false (apply it)")
    if cursor is not None and changes_cursor is not None:
        raise InvalidArgument("give at most one of cursor or changes_cursor")
    if changes_cursor is not None and not plan:
        raise InvalidArgument("changes_cursor: lists a plan's changes (plan: true)")
    only = _only(event_ids, disposition, held_only)
    expected = expected_version(expect_version)
    _stage(rt)
    row, resolved, grant = await _webhook(rt, caller, webhook_id)
    rp = _Replay(rt, resolved, grant)
    hook = str(row["id"])
    config = config_of(row)
    version = int(row["routing_version"])  # the version of these rules: read with them
    if expected is not None and version != expected:
        raise Conflict(
            f"webhook {clip(webhook_id)} is at version {version}, not {expected}: its rules "
            "changed since that version was planned; plan again",
            current_version=version,
        )
    listing = changes_cursor is not None
    window = call_window(last, since, cursor, changes_cursor)
    cap = rp.max_events
    total = await count_window(rt, hook, window, cap, only) if progress is not None else None
    clock = Clock(rp.deadline_s, progress, total)
    by = author_of(caller)
    taken, changed, stopped, last_row = 0, 0, None, None
    counts: Counter[str] = Counter()  # still_held, pending, repeat
    todos: Counter[str] = Counter()
    queues: Counter[str] = Counter()
    totals = _Totals()
    listed: list[dict[str, Any]] = []
    state_at: list[tuple[Row, int] | None] = [None]  # the last event listed, and where
    more = False  # a listing call found a change past its page
    batch: list[tuple[Row, Decision, Any, int]] = []
    planned: dict[str, str] = {}  # a plan's once claims: key -> the event that takes it

    async def settle() -> None:
        nonlocal changed, more
        state = await rt.store.reroute_state([str(r["id"]) for r, _, _, _ in batch], version)
        chosen: list[tuple[dict[str, Any], Decision, list[str], Row]] = []
        for event, decision, envelope, position in batch:
            had = state.get(str(event["id"]))
            if had is None or (held_only and had["disposition"] != DISPOSITION_HELD):
                continue
            if had["disposition"] == DISPOSITION_PENDING:
                counts["pending"] += 1  # its deferred stage routes it, and writes its trace
                continue
            if had["rerouted"]:
                continue  # re-routed under this version already: nothing again
            if config.holds(decision.trace):
                counts["still_held"] += had["disposition"] == DISPOSITION_HELD
                continue
            have = set(had["endpoints"])
            new = [] if decision.drop else [e for e in decision.endpoints if e not in have]
            moved = (
                had["disposition"] == DISPOSITION_HELD
                or (decision.drop != (had["disposition"] == "dropped"))
                or (not decision.drop and decision.queue != _stored_queue(had))
            )
            if not (new or moved):
                continue
            if listing and len(listed) + len(chosen) >= page:
                more = True
                break
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
                "_at": position,
                "_event": event,
            }
            claimed = (
                Taken(rt, resolved, event, decision, envelope)
                if not plan or (new and (decision.once or decision.work_order))
                else None
            )
            if plan:
                once = (
                    None
                    if claimed is None
                    else await claimed.once_state(rt, item["event_id"], planned)
                )
                if once is not None:
                    item["once"] = once
                    if once["state"] == ONCE_REPEAT:
                        new = item["create"] = []
                        counts["repeat"] += 1
            else:
                assert claimed is not None
                item["_write"] = prepared(
                    rt, resolved, event, had, decision, claimed, new, version, by
                )
            chosen.append((item, decision, new, event))
            # live deliveries share this event loop: let them in between events
            await asyncio.sleep(0)
        if not plan and chosen:
            applied = await rt.store.apply_reroutes(
                hook, [i["_write"][0] for i, _, _, _ in chosen], version
            )
        else:
            applied = [(None, None)] * len(chosen)
        rings = []
        for (item, decision, new, _event), (made, holder) in zip(chosen, applied, strict=True):
            if not plan:
                if made is None:
                    continue  # another call re-routed it under this version meanwhile
                rings.append((item["_write"][1], made))
                if holder is not None:
                    item["once"] = {"state": ONCE_REPEAT, "held_by": holder}
                    counts["repeat"] += 1
                item["created"] = [t["id"] for t in made]
                new = [t["endpoint_id"] for t in made]
            changed += 1
            todos.update(new)
            if new and decision.queue is not None:
                queues[decision.queue] += len(new)
            at, row = item.pop("_at"), item.pop("_event")
            item.pop("_write", None)
            if len(listed) < page:
                listed.append(item)
                state_at[0] = (row, at)
        ring_sinks_many(rt, rings)  # the sinks, for the batch's new todos: one turn

    stream = evaluated(
        rt,
        rp.verdict,
        resolved,
        (config,),
        window,
        limit=cap,
        # an apply writes each changed event's todos from its envelope: built once
        keep_envelopes=rp.keep_envelopes or not plan,
        only=only,
    )
    batch_started = time.monotonic()
    async with contextlib.aclosing(stream) as events:
        async for found in events:
            trace = found.row.get("routing_trace")
            now = await rp.run(config, found.verdicts[0], found.envelope, trace)
            totals.add(now)
            taken += 1
            batch.append((found.row, now.decision, found.envelope, taken))
            last_row = found.row
            if len(batch) >= SETTLE:
                await settle()
                batch.clear()
                if more:
                    break
                if not plan:  # an apply writes: live deliveries first
                    rest = liveload.rest_for(time.monotonic() - batch_started)
                    if rest:
                        await asyncio.sleep(rest)
                batch_started = time.monotonic()
            await clock.tick(taken)
            if clock.expired():
                stopped = "deadline"
                break
    if batch and not more:
        await settle()
    if not plan and await rt.store.resolve_webhook_by_id(hook) is None:
        # deleted between two batches: its events left the window, which ended it early
        raise NotFound(f"webhook {clip(webhook_id)} not found: deleted during the re-route")
    if (
        stopped is None
        and not more
        and last_row is not None
        and taken >= cap
        and (window.remaining is None or taken < window.remaining)
    ):
        stopped = "max_events"
    await clock.tick(taken, force=True)
    out: dict[str, Any] = {
        "webhook_id": hook,
        "version": version,
        "candidate_hash": config_hash(config.to_json()),
        "plan": plan,
    }
    if not listing:
        key = "todos_planned" if plan else "todos_created"
        out.update(
            evaluated=taken,
            changed=changed,
            skipped=counts["pending"],
            still_held=counts["still_held"],
            pending=counts["pending"],
            repeat=counts["repeat"],
            totals=totals.view(),
            by_endpoint=dict(todos),
            by_queue=dict(queues),
        )
        out[key] = sum(todos.values())
    out["events"] = listed
    where = state_at[0]
    if plan and where is not None and (more or (not listing and changed > len(listed))):
        out["changes_cursor"] = window.cursor(*where)
    elif listing and stopped is not None and last_row is not None:
        out["changes_cursor"] = window.cursor(last_row, taken)
    if stopped is not None and last_row is not None and not listing:
        out["next_cursor"] = window.cursor(last_row, taken)
        out["stopped"] = stopped
    return out


async def release_held(
    rt: Runtime,
    caller: Row | None,
    webhook_id: str,
    *,
    last: Any = None,
    since: Any = None,
    cursor: Any = None,
    changes_cursor: Any = None,
    event_ids: Any = None,
    plan: Any = True,
    progress: Progress | None = None,
    expect_version: Any = None,
) -> dict[str, Any]:
    """Re-route the ``held`` deliveries through the current rules: each goes where they say
    now (``routed`` with its todos, ``dropped``, or a ``repeat`` of a once claim another
    event holds), once. The window counts held deliveries only: ``last`` N is the newest N
    held ones, however many others came since."""
    return await reroute_events(
        rt,
        caller,
        webhook_id,
        last=last,
        since=since,
        cursor=cursor,
        changes_cursor=changes_cursor,
        event_ids=event_ids,
        plan=plan,
        progress=progress,
        held_only=True,
        expect_version=expect_version,
    )


__all__ = ["release_held", "reroute_events"]
