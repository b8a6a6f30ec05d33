"""Answers put together from several reads see one snapshot (``Database.snapshot``): a
commit falling between the reads never shows half of itself."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from sbdeliveries import TODO, event

from switchboard.routing.model import DISPOSITION_PENDING
from switchboard.runtime import Runtime
from switchboard.service import events, identity
from switchboard.store import Database

PENDING = {"stage": "pending", "pending": "llm"}
COUNT = "SELECT count(*) AS n FROM humans"


async def _humans(db: Database) -> int:
    """How many humans ``db`` reads (in the snapshot of the task asking, if any)."""
    row = await db.fetchone(COUNT)
    assert row is not None
    return int(row["n"])


async def _endpoint(rt: Runtime) -> str:
    await identity.add_human(rt, "alice")
    made = await identity.vend_endpoint(rt, owner="alice", name="ep", queues=["inbox"])
    return str(made["endpoint_id"])


async def test_reads_in_a_snapshot_do_not_see_a_commit_between_them(
    runtime: Runtime, dsn: str
) -> None:
    db = runtime.store.db
    with psycopg.connect(dsn, autocommit=True) as other:
        async with db.snapshot():
            before = await _humans(db)
            other.execute("INSERT INTO humans (name) VALUES ('bob')")
            async with db.snapshot():  # nested: the outer snapshot holds
                inner = await db.fetchall(COUNT)
            after = await _humans(db)
        outside = await _humans(db)
    assert before == after == inner[0]["n"]
    assert outside == before + 1  # committed: seen once the snapshot is over


async def test_a_task_started_inside_a_snapshot_reads_outside_it(
    runtime: Runtime, dsn: str
) -> None:
    """Only the task that opened the snapshot reads in it: a task it starts (a batch
    flusher, say) copies the context but may outlive the block and its connection."""
    db = runtime.store.db
    with psycopg.connect(dsn, autocommit=True) as other:
        async with db.snapshot():
            before = await _humans(db)
            other.execute("INSERT INTO humans (name) VALUES ('carol')")
            child = await asyncio.create_task(_humans(db))
            after = await _humans(db)
    assert after == before and child == before + 1


async def test_a_write_inside_a_snapshot_fails_and_leaves_nothing(
    runtime: Runtime, dsn: str
) -> None:
    with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
        async with runtime.store.db.snapshot():
            await runtime.store.db.fetchone("INSERT INTO humans (name) VALUES ('eve') RETURNING 1")
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM humans WHERE name = 'eve'").fetchone() == (0,)
    # the pool lent a working connection again
    assert await runtime.store.db.fetchone("SELECT 1 AS ok") == {"ok": 1}


async def test_an_event_is_shown_with_the_todos_of_the_same_moment(runtime: Runtime) -> None:
    """Pending events are decided (disposition and todos in one commit) while readers show
    them: an event is pending exactly when it has no todo (read apart, a decision
    committing between the event and its todos showed a pending event with todos)."""
    endpoint = await _endpoint(runtime)
    n = 150
    made = [
        await runtime.store.record_delivery(
            event(f"s{i}", disposition=DISPOSITION_PENDING, trace=PENDING), TODO, [endpoint]
        )
        for i in range(n)
    ]
    ids = [o.event_id for o in made]
    done = asyncio.Event()
    deciding = 0  # the readers show the event being decided: the race's one window

    async def decide() -> None:
        nonlocal deciding
        try:
            for claimed in range(n):
                deciding = claimed
                (row,) = await runtime.store.claim_pending("llm", "w", 1, 30)
                out = await runtime.store.finish_pending(
                    str(row["event_id"]),
                    "w",
                    {"stage": "llm"},
                    "routed",
                    {**TODO, "external_id": f"s{claimed}"},
                    [endpoint],
                )
                assert out is not None and len(out.todos) == 1
                await asyncio.sleep(0)
        finally:
            done.set()

    async def show() -> int:
        reads = 0
        while not done.is_set():
            view: dict[str, Any] = await events.show_event(runtime, None, ids[deciding])
            pending = view["disposition"] == DISPOSITION_PENDING
            assert pending == (view["todos"] == []), (view["disposition"], view["todos"])
            reads += 1
        return reads

    _, *reads = await asyncio.gather(decide(), show(), show())
    assert min(reads) > 20  # the readers really ran beside the decisions
    final = [await events.show_event(runtime, None, i) for i in ids]
    assert all(v["disposition"] == "routed" and len(v["todos"]) == 1 for v in final)
