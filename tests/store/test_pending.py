"""Pending events in the store: queued with the event, claimed fairly under a lease, and
decided exactly once (a worker whose lease was taken over writes nothing)."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
from sbdeliveries import event

from switchboard.runtime import Runtime
from switchboard.service import identity

PENDING = {"stage": "pending", "pending": "llm"}
TODO = {"queue": "inbox", "title": "t", "payload": {"n": 1}, "work_order": None}


async def _endpoints(rt: Runtime) -> list[str]:
    await identity.add_human(rt, "alice")
    made = [
        await identity.vend_endpoint(rt, owner="alice", name=f"ep{i}", queues=["inbox"])
        for i in range(2)
    ]
    return [str(e["endpoint_id"]) for e in made]


def _pending(external_id: str) -> dict[str, Any]:
    return event(external_id, disposition="pending", trace=PENDING)


def _rows(dsn: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql, args).fetchall()


async def test_a_pending_delivery_is_queued_with_its_event_and_makes_no_todo(
    runtime: Runtime, dsn: str
) -> None:
    eps = await _endpoints(runtime)
    alone = await runtime.store.record_delivery(_pending("p-alone"), TODO, eps)
    # At once: group commit writes them with the batch statement.
    batched = await asyncio.gather(
        *(runtime.store.record_delivery(_pending(f"p{i}"), TODO, eps) for i in range(3))
    )
    for out in [alone, *batched]:
        assert out.new_event and out.pending and out.todos == []
    ids = {alone.event_id, *(o.event_id for o in batched)}
    queued = _rows(dsn, "SELECT event_id::text, stage, attempts FROM pending_events")
    assert {r[0] for r in queued} == ids and {(r[1], r[2]) for r in queued} == {("llm", 0)}
    assert _rows(dsn, "SELECT count(*) FROM todos WHERE event_id::text = ANY(%s)", list(ids)) == [
        (0,)
    ]
    again = await runtime.store.record_delivery(_pending("p-alone"), TODO, eps)
    assert not again.new_event and again.pending and again.event_id == alone.event_id


async def test_claims_take_each_endpoints_oldest_in_turn_and_never_the_same_row(
    runtime: Runtime, dsn: str
) -> None:
    eps = await _endpoints(runtime)
    busy = [await runtime.store.record_delivery(_pending(f"a{i}"), TODO, eps) for i in range(6)]
    quiet = [await runtime.store.record_delivery(_pending(f"b{i}"), TODO, eps) for i in range(2)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        for outs, endpoint in ((busy, eps[0]), (quiet, eps[1])):
            conn.execute(
                "UPDATE pending_events SET endpoint_id = %s WHERE event_id::text = ANY(%s)",
                (endpoint, [o.event_id for o in outs]),
            )
    first = await runtime.store.claim_pending("llm", "w1", 4, 30)
    # The quiet endpoint's two are not behind the busy one's backlog.
    assert {r["event_id"] for r in first} == {
        busy[0].event_id,
        busy[1].event_id,
        quiet[0].event_id,
        quiet[1].event_id,
    }
    assert all(r["attempts"] == 1 for r in first)
    # Two workers at once: disjoint claims, and leased rows are never claimed again.
    two = await asyncio.gather(
        runtime.store.claim_pending("llm", "w2", 3, 30),
        runtime.store.claim_pending("llm", "w3", 3, 30),
    )
    got = [r["event_id"] for claim in two for r in claim]
    assert sorted(got) == sorted(o.event_id for o in busy[2:])
    assert await runtime.store.claim_pending("llm", "w4", 3, 30) == []

    # A lease that runs out is taken over, an attempt more; the old holder writes nothing.
    lost = first[0]["event_id"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE pending_events SET lease_until = now() - interval '1 s' WHERE event_id = %s",
            (lost,),
        )
    [again] = await runtime.store.claim_pending("llm", "w5", 3, 30)
    assert again["event_id"] == lost and again["attempts"] == 2
    trace = {"stage": "default", "cause": "no_match_default", "action": {"queue": "inbox"}}
    todo = {**TODO, "external_id": again["external_id"]}
    assert await runtime.store.finish_pending(lost, "w1", trace, "routed", todo, eps) is None
    done = await runtime.store.finish_pending(lost, "w5", trace, "routed", todo, eps)
    assert done is not None and [t["endpoint_id"] for t in done.todos] == eps
    assert all(t["created"] for t in done.todos)
    assert await runtime.store.finish_pending(lost, "w5", trace, "routed", todo, eps) is None
    assert _rows(dsn, "SELECT disposition FROM events WHERE id = %s", lost) == [("routed",)]
    assert _rows(dsn, "SELECT count(*) FROM todos WHERE event_id = %s", lost) == [(2,)]

    # A stopping worker gives its leases back: free at once, the attempt uncounted.
    back = [r["event_id"] for r in two[0]]
    assert await runtime.store.release_pending("w2", back) == len(back)
    again = await runtime.store.claim_pending("llm", "w6", 10, 30)
    assert sorted(r["event_id"] for r in again) == sorted(back)
    assert {r["attempts"] for r in again} == {1}
    assert await runtime.store.pending_counts() == {"llm": 7}
