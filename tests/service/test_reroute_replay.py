"""A re-route decides exactly as the diff does (issue 36): the same replay, the same totals
and candidate hash, a paged change list; pending deliveries are left to their stage; the
filters; a todo already there is never touched; the sinks get what live delivery gives."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from switchboard.errors import InvalidArgument
from switchboard.runtime import Runtime
from switchboard.service import history, identity, rules, webhooks
from switchboard.service.ingest import ingest
from switchboard.service.reroute import release_held, reroute_events
from switchboard.service.sinkrun import drain_sinks
from switchboard.sources import Headers

WRONG = [{"id": "thirds", "expr": ".payload.n % 3 == 0", "action": {"drop": True}}]
FIXED = [{"id": "thirds", "expr": ".payload.n % 3 == 0", "action": {"queue": "review"}}]


async def _seeded(rt: Runtime, n: int, config: list[dict[str, Any]]) -> tuple[Any, str, str]:
    await identity.add_human(rt, "alice")
    made = await identity.vend_endpoint(
        rt,
        owner="alice",
        name="owner",
        queues=["inbox", "review"],
        webhook_queues=["inbox", "review"],
        source_types=["generic"],
        webhook_max=2,
    )
    owner = await rt.store.get_endpoint(made["endpoint_id"])
    created = await webhooks.create_webhook(rt, owner, "generic", "inbox")
    hook = str(created["webhook_id"])
    await rules.set_rules(rt, owner, hook, config)
    token = str(created["ingest_url"]).rsplit("/", 1)[1]
    for i in range(n):
        await _deliver(rt, token, i)
    return owner, hook, token


async def _deliver(rt: Runtime, token: str, i: int, body: Any = None) -> None:
    raw = json.dumps({"n": i} if body is None else body).encode()
    reply = await ingest(rt, token, Headers({"X-Delivery-Id": f"d{i}"}), raw, None)
    assert reply.status == 202


async def _event_ids(rt: Runtime, hook: str, disposition: str | None = None) -> list[str]:
    rows = await rt.store.db.fetchall(
        "SELECT id::text FROM events WHERE webhook_id = %s"
        " AND (%s::text IS NULL OR disposition = %s) ORDER BY received_at",
        (hook, disposition, disposition),
    )
    return [r["id"] for r in rows]


async def test_a_plan_is_the_diff_totals_hash_and_paged_changes(runtime: Runtime) -> None:
    rt = runtime
    owner, hook, _ = await _seeded(rt, 330, WRONG)
    diff = await history.diff_rules(rt, owner, hook, rules=FIXED, last=1000)
    moved = [c["event_id"] for c in diff["changes"]]
    more = diff.get("changes_cursor")
    while more is not None:
        page = await history.diff_rules(rt, owner, hook, rules=FIXED, changes_cursor=more)
        moved += [c["event_id"] for c in page["changes"]]
        more = page.get("changes_cursor")
    await rules.set_rules(rt, owner, hook, FIXED, diffed=diff["candidate_hash"])

    plan = await reroute_events(rt, owner, hook, last=1000, plan=True)
    assert plan["evaluated"] == diff["evaluated"] == 330
    assert plan["totals"] == diff["totals"]["candidate"]
    assert plan["candidate_hash"] == diff["candidate_hash"]
    assert plan["changed"] == diff["changed"] == 110 and plan["todos_planned"] == 110
    assert len(plan["events"]) == 100 and "changes_cursor" in plan
    listed = [e["event_id"] for e in plan["events"]]
    rest = await reroute_events(rt, owner, hook, changes_cursor=plan["changes_cursor"])
    assert "totals" not in rest and "changes_cursor" not in rest
    listed += [e["event_id"] for e in rest["events"]]
    assert len(listed) == len(set(listed)) == 110 and set(listed) == set(moved)
    with pytest.raises(InvalidArgument, match="changes_cursor"):
        await reroute_events(rt, owner, hook, changes_cursor=plan["changes_cursor"], plan=False)


async def test_a_pending_delivery_is_never_rerouted(runtime: Runtime) -> None:
    rt = runtime
    owner, hook, _ = await _seeded(rt, 6, WRONG)
    dropped = await _event_ids(rt, hook, "dropped")
    assert len(dropped) == 2
    # one of them waits on a deferred stage (as the llm stage leaves it): not re-routed
    await rt.store.db.fetchone(
        "UPDATE events SET disposition = 'pending' WHERE id = %s RETURNING id", (dropped[0],)
    )
    await rules.set_rules(rt, owner, hook, FIXED)
    plan = await reroute_events(rt, owner, hook, plan=True)
    assert plan["pending"] == 1 and plan["skipped"] == 1
    assert [e["event_id"] for e in plan["events"]] == [dropped[1]]
    done = await reroute_events(rt, owner, hook, plan=False)
    assert done["todos_created"] == 1 and done["pending"] == 1
    event = await rt.store.get_event(dropped[0])
    assert event is not None and "reroutes" not in event["routing_trace"]
    assert event["disposition"] == "pending"
    assert not await rt.store.db.fetchall("SELECT 1 FROM todos WHERE event_id = %s", (dropped[0],))
    with pytest.raises(InvalidArgument, match="disposition"):
        await reroute_events(rt, owner, hook, disposition="pending")


async def test_an_existing_todo_is_untouched_while_another_target_gains_one(
    runtime: Runtime,
) -> None:
    rt = runtime
    owner, hook, _ = await _seeded(rt, 3, [])
    rows = await rt.store.db.fetchall(
        "SELECT t.id::text, t.event_id::text, t.endpoint_id::text FROM todos t"
        " JOIN events e ON e.id = t.event_id WHERE e.webhook_id = %s ORDER BY e.received_at",
        (hook,),
    )
    assert len(rows) == 3
    claimed, done = rows[0], rows[1]
    await rt.store.db.fetchone(
        "UPDATE todos SET state = 'claimed' WHERE id = %s RETURNING id", (claimed["id"],)
    )
    await rt.store.db.fetchone(
        "UPDATE todos SET state = 'done' WHERE id = %s RETURNING id", (done["id"],)
    )
    second = await identity.vend_endpoint(rt, owner="alice", name="second", queues=["inbox"])
    other = str(second["endpoint_id"])
    await webhooks.add_route(rt, owner, hook, other)

    plan = await reroute_events(rt, owner, hook, plan=True)
    assert plan["changed"] == 3 and plan["by_endpoint"] == {other: 3}
    assert all(e["create"] == [other] for e in plan["events"])
    applied = await reroute_events(rt, owner, hook, plan=False)
    assert applied["todos_created"] == 3
    after = await rt.store.db.fetchall(
        "SELECT t.id::text, t.event_id::text, t.endpoint_id::text, t.state FROM todos t"
        " JOIN events e ON e.id = t.event_id WHERE e.webhook_id = %s",
        (hook,),
    )
    states = {t["id"]: t["state"] for t in after}
    assert states[claimed["id"]] == "claimed" and states[done["id"]] == "done"
    per_event = {(t["event_id"], t["endpoint_id"]) for t in after}
    assert len(after) == 6 and all((r["event_id"], other) in per_event for r in rows)


async def test_the_filters_event_ids_and_disposition(runtime: Runtime) -> None:
    rt = runtime
    owner, hook, _ = await _seeded(rt, 9, WRONG)
    await rules.set_rules(rt, owner, hook, FIXED)
    dropped = await _event_ids(rt, hook, "dropped")
    assert len(dropped) == 3
    one = await reroute_events(rt, owner, hook, event_ids=[dropped[0]], plan=True)
    assert one["evaluated"] == 1 and [e["event_id"] for e in one["events"]] == [dropped[0]]
    only = await reroute_events(rt, owner, hook, disposition="dropped", plan=True)
    assert only["evaluated"] == 3 and only["changed"] == 3
    routed = await reroute_events(rt, owner, hook, disposition="routed", plan=True)
    assert routed["evaluated"] == 6 and routed["changed"] == 0
    done = await reroute_events(rt, owner, hook, event_ids=dropped[:2], plan=False)
    assert done["todos_created"] == 2
    left = await reroute_events(rt, owner, hook, disposition="dropped", plan=True)
    assert [e["event_id"] for e in left["events"]] == [dropped[2]]
    for bad in ([], ["nope"], "x"):
        with pytest.raises(InvalidArgument, match="event_ids"):
            await reroute_events(rt, owner, hook, event_ids=bad)
    with pytest.raises(InvalidArgument, match="disposition"):
        await reroute_events(rt, owner, hook, disposition="lost")


FAULTY = [{"id": "up", "expr": "(.payload.v | ascii_downcase) == 1", "action": {"drop": True}}]
FIXED_UP = [{"id": "up", "expr": "(.payload.v | tostring) == 1", "action": {"drop": True}}]


async def test_a_release_finds_held_deliveries_behind_newer_ones(runtime: Runtime) -> None:
    rt = runtime
    owner, hook, token = await _seeded(rt, 0, [])
    await rules.save_config(rt, owner, hook, lambda c: {**c, "rules": FAULTY, "on_fault": "hold"})
    for i in range(3):
        await _deliver(rt, token, i, {"v": i})  # a number: ascii_downcase faults, held
    for i in range(3, 13):
        await _deliver(rt, token, i, {"v": "s"})  # newer, routed
    assert len(await _event_ids(rt, hook, "held")) == 3
    await rules.save_config(rt, owner, hook, lambda c: {**c, "rules": FIXED_UP})
    # the window is the newest held deliveries, however many others came since
    plan = await release_held(rt, owner, hook, last=5, plan=True)
    assert plan["evaluated"] == 3 and plan["changed"] == 3
    done = await release_held(rt, owner, hook, last=5, plan=False)
    assert done["todos_created"] == 3
    assert await _event_ids(rt, hook, "held") == []


class _Recorder:
    """A sink standing in for an outside system: what it was handed."""

    name = "recorder"

    def __init__(self) -> None:
        self.calls: list[tuple[Any, Any]] = []

    async def deliver(self, rt: Any, event: Any, todos: Any) -> None:
        self.calls.append((event, todos))


async def test_the_sinks_and_the_doorbell_get_a_reroutes_todos(runtime: Runtime, dsn: str) -> None:
    from prometheus_client import REGISTRY

    rt = runtime
    owner, hook, _ = await _seeded(rt, 3, WRONG)
    recorder = rt.registries.sinks.add(_Recorder())
    assert "doorbell" in [s.name for s in rt.registries.sinks]
    rung = REGISTRY.get_sample_value("switchboard_doorbells_rung_total") or 0.0
    await rules.set_rules(rt, owner, hook, FIXED)
    with psycopg.connect(dsn, autocommit=True) as bell:
        bell.execute("LISTEN todo_ready")
        done = await reroute_events(rt, owner, hook, plan=False)
        # The apply's transaction rang the doorbell: heard as soon as it committed.
        rings = [n.payload for n in bell.notifies(timeout=2, stop_after=1)]
    assert rings == [f"{owner['id']}:review"]
    assert done["todos_created"] == 1
    await drain_sinks()
    [(event, todos)] = recorder.calls
    [item] = done["events"]
    assert event["id"] == item["event_id"] and event["disposition"] == "routed"
    assert event["envelope"]["payload"] == {"n": 0} and event["envelope"]["source"] == "generic"
    assert [t["id"] for t in todos] == item["created"] and todos[0]["queue"] == "review"
    assert (REGISTRY.get_sample_value("switchboard_doorbells_rung_total") or 0.0) > rung
