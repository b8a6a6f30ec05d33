"""The drain verbs at the service level, where the timing bits (leases, backoff) are cheap."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from sbworld import vended_endpoint

from switchboard.errors import Conflict, Forbidden, InvalidArgument, NotFound
from switchboard.runtime import Runtime
from switchboard.service import identity, todos

CONFIG = """
[todos]
lease_ttl_seconds = 30
max_attempts = 3
backoff_base_seconds = 0.2
backoff_max_seconds = 0.3
"""


@pytest.fixture
def rt(runtime: Runtime) -> Runtime:
    """The conftest's runtime, configured by CONFIG."""
    return runtime


_endpoint = vended_endpoint


def _todos(dsn: str, endpoint_id: str, queue: str, n: int) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [
            str(
                conn.execute(
                    "INSERT INTO todos (endpoint_id, queue, idempotency_key, title, payload,"
                    " routing_trace) VALUES (%s, %s, %s, %s, '{\"n\": 1}',"
                    ' \'{"stage": "default"}\') RETURNING id',
                    (endpoint_id, queue, f"k{queue}{i}", f"t{i}"),
                ).fetchone()[0]
            )
            for i in range(n)
        ]  # type: ignore[index]


async def test_claim_complete_and_scope(rt: Runtime, dsn: str) -> None:
    await identity.add_human(rt, "alice")
    await identity.add_human(rt, "bob")
    me = await _endpoint(rt, "alice", "me", ["inbox", "handoff"])
    other = await _endpoint(rt, "bob", "other", ["inbox"])
    [mine] = _todos(dsn, me["id"], "inbox", 1)
    [hidden] = _todos(dsn, me["id"], "elsewhere", 1)  # a queue outside my scope
    [theirs] = _todos(dsn, other["id"], "inbox", 1)
    owner = me["id"]

    listed = await todos.list_todos(rt, me)
    assert [t["todo_id"] for t in listed["todos"]] == [mine]
    assert "payload" not in listed["todos"][0]
    with pytest.raises(Forbidden):
        await todos.list_todos(rt, me, queue="elsewhere")
    with pytest.raises(Forbidden):
        await todos.claim_next(rt, me, owner=owner, queue="elsewhere")
    with pytest.raises(InvalidArgument):
        await todos.list_todos(rt, me, state="nope")
    for todo_id in (theirs, hidden, "not-a-uuid"):
        with pytest.raises(NotFound):
            await todos.claim(rt, me, todo_id, owner=owner)

    got = (await todos.claim(rt, me, mine, owner=owner))["todo"]
    assert got["state"] == "claimed" and got["attempts"] == 1
    assert got["payload"] == {"n": 1} and got["routing_trace"] == {"stage": "default"}
    with pytest.raises(Conflict):  # already claimed, lease alive
        await todos.claim(rt, me, mine, owner=owner)
    with pytest.raises(NotFound):  # only the claimant's endpoint may heartbeat
        await todos.heartbeat(rt, other, mine, owner=other["id"])
    with pytest.raises(Conflict):  # same endpoint, another claimant identity
        await todos.heartbeat(rt, me, mine, owner="someone-else")
    beat = await todos.heartbeat(rt, me, mine, owner=owner)
    assert beat["lease_expires_at"] > got["lease_expires_at"]
    done = (await todos.complete(rt, me, mine, owner=owner, result={"ok": True}))["todo"]
    assert done["state"] == "done" and done["result"] == {"ok": True}
    assert done["completed_at"] is not None
    with pytest.raises(Conflict):
        await todos.complete(rt, me, mine, owner=owner)
    assert (await todos.list_todos(rt, me, state="done"))["todos"][0]["todo_id"] == mine


async def test_fail_backs_off_then_dies(rt: Runtime, dsn: str) -> None:
    await identity.add_human(rt, "alice")
    me = await _endpoint(rt, "alice", "me", ["inbox"])
    [tid] = _todos(dsn, me["id"], "inbox", 1)
    owner = me["id"]
    for attempt in (1, 2):
        got = await todos.claim_next(rt, me, owner=owner)
        assert got["todo"]["todo_id"] == tid and got["todo"]["attempts"] == attempt
        failed = (await todos.fail(rt, me, tid, owner=owner, result={"err": attempt}))["todo"]
        assert failed["state"] == "pending" and failed["available_at"] > got["todo"]["created_at"]
        # Backing off: not claimable until available_at passes.
        assert (await todos.claim_next(rt, me, owner=owner)) == {"empty": True}
        await asyncio.sleep(0.35)
    got = await todos.claim_next(rt, me, owner=owner)
    assert got["todo"]["attempts"] == 3
    dead = (await todos.fail(rt, me, tid, owner=owner))["todo"]
    assert dead["state"] == "dead"
    await asyncio.sleep(0.35)
    assert (await todos.claim_next(rt, me, owner=owner)) == {"empty": True}


async def test_a_result_too_large_to_send_again_is_refused_and_changes_nothing(
    rt: Runtime, dsn: str
) -> None:
    """A result travels with every later claim of its todo: one past ``[todos]
    result_max_bytes`` is refused before it is stored (the todo still held, as it was)."""
    await identity.add_human(rt, "alice")
    me = await _endpoint(rt, "alice", "me", ["inbox"])
    [tid] = _todos(dsn, me["id"], "inbox", 1)
    owner = me["id"]
    held = (await todos.claim_next(rt, me, owner=owner))["todo"]
    fits = "x" * (65536 - 2)  # its JSON is the limit exactly: two quotes
    for verb in (todos.complete, todos.fail):
        with pytest.raises(InvalidArgument) as refused:
            await verb(rt, me, tid, owner=owner, result={"log": fits})
        assert str(refused.value) == (
            "result: 65544 bytes as JSON, over the limit of 65536 ([todos] result_max_bytes);"
            " store a large result elsewhere and pass its location"
        )
    [still] = (await todos.list_todos(rt, me, state="claimed"))["todos"]
    assert (still["todo_id"], still["attempts"]) == (tid, held["attempts"])
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT result FROM todos WHERE id = %s", (tid,)).fetchone()
    assert row == (None,)
    done = (await todos.complete(rt, me, tid, owner=owner, result=fits))["todo"]
    assert done["state"] == "done" and done["result"] == fits


async def test_verbs_taking_an_id_find_nothing_for_a_malformed_one(rt: Runtime) -> None:
    await identity.add_human(rt, "alice")
    me = await _endpoint(rt, "alice", "me", ["inbox"])
    for verb in (todos.claim, todos.complete, todos.fail, todos.heartbeat):
        with pytest.raises(NotFound, match="^todo 12 not found$"):
            await verb(rt, me, "12", owner=me["id"])


async def test_expired_lease_is_claimable_again(rt: Runtime, dsn: str) -> None:
    await identity.add_human(rt, "alice")
    me = await _endpoint(rt, "alice", "me", ["inbox"])
    [tid] = _todos(dsn, me["id"], "inbox", 1)
    first = await todos.claim_next(rt, me, owner="worker-1", lease_ttl_seconds=0.2)
    assert first["todo"]["todo_id"] == tid
    assert (await todos.claim_next(rt, me, owner="worker-2")) == {"empty": True}
    await asyncio.sleep(0.3)
    again = await todos.claim_next(rt, me, owner="worker-2", lease_ttl_seconds=0.2)
    assert again["todo"]["todo_id"] == tid and again["todo"]["attempts"] == 2
    with pytest.raises(Conflict):  # the first claimant lost it
        await todos.complete(rt, me, tid, owner="worker-1")
    await asyncio.sleep(0.3)
    assert (await todos.claim(rt, me, tid, owner="worker-3", lease_ttl_seconds=0.2))["todo"][
        "attempts"
    ] == 3
    await asyncio.sleep(0.3)
    # Its attempts are spent: an expired lease now buries it instead.
    assert (await todos.claim_next(rt, me, owner="worker-4")) == {"empty": True}
    assert (await todos.list_todos(rt, me, state="dead"))["todos"][0]["todo_id"] == tid
    with pytest.raises(InvalidArgument):
        await todos.claim_next(rt, me, owner="w", lease_ttl_seconds=0)
