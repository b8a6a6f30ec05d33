"""Kept resolutions: a change moves the resolve epoch, and a write made with a stale one stores
nothing (in a batch, alone, with a ``once`` claim) and says so."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from sbdeliveries import TODO, count, endpoints, event, generic_webhook, in_one_batch

from switchboard.runtime import Runtime
from switchboard.secrets_box import hash_token
from switchboard.service import identity, webhooks
from switchboard.store import OnceClaim, StaleResolution


def _epoch(dsn: str) -> int:
    return count(dsn, "SELECT n FROM resolve_epoch")


def _change(dsn: str, sql: str, *args: Any) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql, args)


async def test_every_table_behind_a_resolution_moves_the_epoch_at_commit(
    runtime: Runtime, dsn: str
) -> None:
    eps = await endpoints(runtime)
    start = _epoch(dsn)
    _change(dsn, "UPDATE endpoints SET scope_queues = scope_queues WHERE id = %s", eps[0])
    assert _epoch(dsn) == start + 1
    # Uncommitted: invisible, and the counter with it; rolled back: never moved.
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE endpoints SET expires_at = now() WHERE id = %s", (eps[1],))
        assert _epoch(dsn) == start + 1
        conn.rollback()
    assert _epoch(dsn) == start + 1
    await identity.add_human(runtime, "bob")
    before = _epoch(dsn)
    await identity.add_friend(runtime, "alice", "bob")
    assert _epoch(dsn) > before
    before = _epoch(dsn)
    hook, _ = await generic_webhook(runtime, "owner")
    owner = hook["owner"]
    before = _epoch(dsn)
    await webhooks.add_route(runtime, owner, hook["webhook_id"], eps[1])
    assert _epoch(dsn) > before
    before = _epoch(dsn)
    _change(dsn, "UPDATE endpoint_webhooks SET routing = routing WHERE id = %s", hook["webhook_id"])
    assert _epoch(dsn) == before + 1


async def test_a_stale_kept_resolution_stores_nothing(runtime: Runtime, dsn: str) -> None:
    eps = await endpoints(runtime)
    old = _epoch(dsn)
    _change(dsn, "UPDATE endpoints SET scope_queues = scope_queues WHERE id = %s", eps[0])
    now = _epoch(dsn)
    # Alone: the single-row statement.
    with pytest.raises(StaleResolution):
        await runtime.store.record_delivery(event("alone"), TODO, eps, epoch=old)
    # In a batch beside current and unkept ones: only the stale one is turned back.
    stale, current, unkept = await in_one_batch(
        runtime,
        eps,
        runtime.store.record_delivery(event("b-stale"), TODO, eps, epoch=old),
        runtime.store.record_delivery(event("b-now"), TODO, eps, epoch=now),
        runtime.store.record_delivery(event("b-none"), TODO, eps),
    )
    assert isinstance(stale, StaleResolution)
    assert current.new_event and len(current.todos) == 2
    assert unkept.new_event and len(unkept.todos) == 2
    # With a once claim: no claim taken either.
    claim = OnceClaim(
        "00000000-0000-0000-0000-000000000002", "k@inbox", {"stage": "default", "once": "repeat"}
    )
    with pytest.raises(StaleResolution):
        await runtime.store.record_delivery(event("o-stale"), TODO, eps, claim, epoch=old)
    assert count(dsn, "SELECT count(*) FROM routing_once WHERE once_key = 'k@inbox'") == 0
    for key in ("alone", "b-stale", "o-stale"):
        assert count(dsn, "SELECT count(*) FROM events WHERE external_id = %s", key) == 0
    # The stale one again, with the current epoch: stored, as if it had just arrived.
    again = await runtime.store.record_delivery(event("b-stale"), TODO, eps, epoch=now)
    assert again.new_event and len(again.todos) == 2
    # A redelivery with a stale epoch is stale, not a redelivery: it resolves again first.
    with pytest.raises(StaleResolution):
        await runtime.store.record_delivery(event("b-stale"), TODO, eps, epoch=old)


async def test_kept_rows_are_retired_by_a_newer_epoch_and_by_their_clock(
    runtime: Runtime, dsn: str
) -> None:
    made, token = await generic_webhook(runtime, "owner")
    eps = [str(made["owner"]["id"])]
    h = hash_token(token)
    row, epoch = await runtime.store.resolve_webhook_kept(h)
    assert row is not None and epoch == _epoch(dsn)
    assert "epoch" not in row and "ttl_s" not in row
    assert runtime.store.resolutions.get(h) is not None
    kept, again = await runtime.store.resolve_webhook_kept(h)
    assert kept == row and kept is not row  # a copy of its own
    # A write that learns of a newer epoch retires every row read before it.
    _change(dsn, "UPDATE endpoints SET scope_queues = scope_queues WHERE id = %s", eps[0])
    with pytest.raises(StaleResolution):
        await runtime.store.record_delivery(event("x"), TODO, eps, epoch=epoch)
    assert runtime.store.resolutions.get(h) is None
    # An endpoint behind it that expires bounds how long it is kept.
    _change(
        dsn, "UPDATE endpoints SET expires_at = now() + interval '1 second' WHERE id = %s", eps[0]
    )
    row, _ = await runtime.store.resolve_webhook_kept(h)
    assert row is not None and row["targets"]
    assert runtime.store.resolutions.get(h) is not None
    await asyncio.sleep(1.2)
    assert runtime.store.resolutions.get(h) is None
    row, _ = await runtime.store.resolve_webhook_kept(h)
    assert row is not None and row["targets"] == []
