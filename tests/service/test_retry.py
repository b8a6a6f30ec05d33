"""``retry``: a dead todo back to pending (the service), and ``id`` on every todo view."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from sbworld import vended_endpoint

from switchboard.errors import Conflict, NotFound
from switchboard.runtime import Runtime
from switchboard.service import identity, todos

CONFIG = """
[todos]
max_attempts = 1
backoff_base_seconds = 0.1
backoff_max_seconds = 0.1
"""


@pytest.fixture
def rt(runtime: Runtime) -> Runtime:
    """The conftest's runtime, configured by CONFIG."""
    return runtime


_endpoint = vended_endpoint


def _todo(dsn: str, endpoint_id: str, queue: str = "inbox", key: str = "k1") -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "INSERT INTO todos (endpoint_id, queue, idempotency_key, title) VALUES"
            " (%s, %s, %s, 't') RETURNING id",
            (endpoint_id, queue, key),
        ).fetchone()
    assert row is not None
    return str(row[0])


async def _kill(rt: Runtime, me: dict[str, Any], todo_id: str) -> dict[str, Any]:
    """Claim and fail once: with max_attempts = 1 the todo is dead."""
    claimed = await todos.claim(rt, me, todo_id, owner="w1")
    failed = await todos.fail(rt, me, todo_id, owner="w1", result={"error": "boom"})
    assert failed["todo"]["state"] == "dead"
    return claimed


async def test_every_todo_view_carries_id(rt: Runtime, dsn: str) -> None:
    await identity.add_human(rt, "alice")
    me = await _endpoint(rt, "alice", "me", ["inbox"])
    tid = _todo(dsn, me["id"])
    [listed] = (await todos.list_todos(rt, me))["todos"]
    [browsed] = (await todos.list_all_todos(rt))["todos"]
    claimed = (await todos.claim(rt, me, tid, owner="w"))["todo"]
    beat = await todos.heartbeat(rt, me, tid, owner="w")
    done = (await todos.complete(rt, me, tid, owner="w"))["todo"]
    for view in (listed, browsed, claimed, beat, done):
        assert view["id"] == view["todo_id"] == tid


async def test_retry_a_dead_todo(rt: Runtime, dsn: str) -> None:
    await identity.add_human(rt, "alice")
    await identity.add_human(rt, "bob")
    me = await _endpoint(rt, "alice", "me", ["inbox"])
    other = await _endpoint(rt, "bob", "other", ["inbox"])
    tid = _todo(dsn, me["id"])

    # Only a dead todo can be retried: pending is a conflict naming its state.
    with pytest.raises(Conflict, match="is pending; only a dead todo"):
        await todos.retry(rt, me, tid)
    await _kill(rt, me, tid)
    # Another endpoint's todo reads as absent, as for claim.
    with pytest.raises(NotFound):
        await todos.retry(rt, other, tid)
    with pytest.raises(NotFound):
        await todos.retry(rt, me, "not-a-uuid")

    again = (await todos.retry(rt, me, tid))["todo"]
    assert again["id"] == tid and again["state"] == "pending"
    assert again["attempts"] == 0 and again["completed_at"] is None
    assert again["result"] == {"error": "boom"}  # why it died, kept until it runs again
    # Claimable at once, with a fresh attempt (max_attempts = 1 was spent before).
    got = await todos.claim_next(rt, me, owner="w2")
    assert got["todo"]["id"] == tid and got["todo"]["attempts"] == 1

    # The operator (no caller) retries any endpoint's; a live one is still a conflict.
    with pytest.raises(Conflict, match="is claimed"):
        await todos.retry(rt, None, tid)
    await todos.fail(rt, me, tid, owner="w2")
    assert (await todos.retry(rt, None, tid))["todo"]["state"] == "pending"
    with pytest.raises(NotFound):
        await todos.retry(rt, None, "00000000-0000-0000-0000-000000000000")


async def test_retry_refused_while_the_delivery_has_a_live_todo(rt: Runtime, dsn: str) -> None:
    await identity.add_human(rt, "alice")
    me = await _endpoint(rt, "alice", "me", ["inbox"])
    dead = _todo(dsn, me["id"], key="same")
    await _kill(rt, me, dead)
    _todo(dsn, me["id"], key="same")  # the delivery landed again while the first was dead
    with pytest.raises(Conflict, match="already has a live todo"):
        await todos.retry(rt, me, dead)
