"""Group commit: concurrent deliveries share one transaction, and each gets its own answer."""

from __future__ import annotations

import asyncio
import random
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sbdeliveries import TODO, batches, count, endpoints, event, in_one_batch
from sbtest import database_refusing, make_env

from switchboard.config import load_config
from switchboard.errors import ConfigError, NotFound, StoreUnavailable
from switchboard.routing.model import DISPOSITION_DROPPED
from switchboard.runtime import Runtime
from switchboard.store import Database, DeliveryOutcome, OnceClaim, Store
from switchboard.store.groupwrite import new_ids


async def test_a_lone_delivery_is_written_at_once_in_a_batch_of_one(runtime: Runtime) -> None:
    eps = await endpoints(runtime)
    before = batches()
    out = await asyncio.wait_for(runtime.store.record_delivery(event("lone"), TODO, eps), 5)
    assert batches() == (before[0] + 1, before[1] + 1)
    assert out.new_event and not out.dropped
    assert [t["endpoint_id"] for t in out.todos] == eps
    assert all(t["created"] for t in out.todos)


async def test_concurrent_deliveries_share_flushes_and_each_gets_its_own_rows(
    runtime: Runtime, dsn: str
) -> None:
    eps = await endpoints(runtime)
    before = batches()
    n = 60
    # Every byte value in the bodies and header blocks, and text that needs escaping in
    # JSON, stored exactly as given (a batch travels as one JSON document, its bytes beside it
    # as binary bytea arrays).
    bodies = [bytes(range(256)) * (i % 3) + f"\r\n{i}\x00\xff".encode("latin-1") for i in range(n)]
    titles = [f't{i} "quoted" \\ \u00e9 \U0001f600 \n' for i in range(n)]
    outs = await asyncio.gather(
        *[
            runtime.store.record_delivery(
                {
                    **event(f"c{i}"),
                    "body": bodies[i],
                    "raw_headers": bodies[-1 - i],
                    "size": len(bodies[i]),
                },
                {**TODO, "title": titles[i]},
                eps,
            )
            for i in range(n)
        ]
    )
    flushes, items = batches()
    assert items - before[1] == n
    assert flushes - before[0] < n / 4, "concurrent deliveries were not written together"
    assert len({o.event_id for o in outs}) == n
    with psycopg.connect(dsn) as conn:
        for i, out in enumerate(outs):
            assert out.new_event and [t["endpoint_id"] for t in out.todos] == eps
            assert all(t["created"] for t in out.todos)
            rows = conn.execute(
                "SELECT e.external_id, t.title, t.endpoint_id::text, e.body,"
                " e.raw_headers FROM todos t JOIN events e ON e.id = t.event_id"
                " WHERE t.id = ANY(%s::uuid[])",
                ([t["id"] for t in out.todos],),
            ).fetchall()
            assert sorted(rows) == sorted(
                (f"c{i}", titles[i], e, bodies[i], bodies[-1 - i]) for e in eps
            )
    assert count(dsn, "SELECT count(*) FROM todos") == 2 * n


async def test_the_same_delivery_twice_in_one_batch_is_one_event_like_a_redelivery(
    runtime: Runtime, dsn: str
) -> None:
    eps = await endpoints(runtime)
    outs = await in_one_batch(
        runtime,
        eps,
        runtime.store.record_delivery(event("dup"), TODO, eps),
        runtime.store.record_delivery(event("other"), TODO, eps),
        runtime.store.record_delivery(event("dup"), TODO, eps),
        runtime.store.record_delivery(event("gone", disposition=DISPOSITION_DROPPED), TODO, eps),
        runtime.store.record_delivery(event("dup"), TODO, eps),
        runtime.store.record_delivery(event("gone", disposition=DISPOSITION_DROPPED), TODO, eps),
    )
    first, other, second, drop1, third, drop2 = outs
    assert first.new_event and all(t["created"] for t in first.todos)
    ids = [t["id"] for t in first.todos]
    for again in (second, third):
        assert not again.new_event and again.event_id == first.event_id
        assert [t["id"] for t in again.todos] == ids
        assert [t["created"] for t in again.todos] == [False, False]
    assert other.new_event and other.event_id != first.event_id
    assert drop1 == DeliveryOutcome(drop1.event_id, True, True)
    assert drop2 == DeliveryOutcome(drop1.event_id, False, True)
    assert count(dsn, "SELECT count(*) FROM events WHERE external_id = 'dup'") == 1
    assert count(dsn, "SELECT count(*) FROM events WHERE external_id = 'gone'") == 1
    assert count(dsn, "SELECT count(*) FROM todos WHERE idempotency_key IN ('dup', 'other')") == 4
    # And across batches, the same answer.
    later = await runtime.store.record_delivery(event("dup"), TODO, eps)
    assert later == second


async def test_once_claims_in_one_batch_hold_once_and_repeat_the_rest(
    runtime: Runtime, dsn: str
) -> None:
    eps = await endpoints(runtime, 1)
    wid = "00000000-0000-0000-0000-000000000001"
    claim = OnceClaim(wid, "issue:7@inbox", {"stage": "default", "once": "repeat"})
    a, b, a_again = await in_one_batch(
        runtime,
        eps,
        runtime.store.record_delivery(event("o-a"), TODO, eps, claim),
        runtime.store.record_delivery(event("o-b"), TODO, eps, claim),
        runtime.store.record_delivery(event("o-a"), TODO, eps, claim),
    )
    holder, repeat = (a, b) if a.todos else (b, a)
    assert holder.new_event and [t["created"] for t in holder.todos] == [True]
    assert repeat.new_event and repeat.repeat and not repeat.todos
    if holder is a:
        assert a_again == DeliveryOutcome(
            a.event_id, False, False, [{**a.todos[0], "created": False}]
        )
    else:
        assert a_again == DeliveryOutcome(a.event_id, False, False, repeat=True)
    assert count(dsn, "SELECT count(*) FROM events WHERE external_id LIKE 'o-%%'") == 2
    assert (
        count(
            dsn,
            "SELECT count(*) FROM events WHERE disposition = 'repeat'"
            " AND routing_trace->>'once' = 'repeat'",
        )
        == 1
    )
    assert count(dsn, "SELECT count(*) FROM routing_once") == 1
    assert count(dsn, "SELECT count(*) FROM todos WHERE idempotency_key LIKE 'o-%%'") == 1


async def test_a_delivery_postgresql_rejects_fails_alone(runtime: Runtime, dsn: str) -> None:
    eps = await endpoints(runtime)
    bad = event("bad", trace={"stage": "default", "detail": "nul \u0000 inside"})
    outs = await in_one_batch(
        runtime,
        eps,
        *[
            runtime.store.record_delivery(bad if i == 5 else event(f"ok{i}"), TODO, eps)
            for i in range(12)
        ],
    )
    assert isinstance(outs[5], psycopg.DataError), outs[5]
    good = [o for i, o in enumerate(outs) if i != 5]
    assert all(
        isinstance(o, DeliveryOutcome) and o.new_event and len(o.todos) == 2 for o in good
    ), good
    assert count(dsn, "SELECT count(*) FROM events WHERE external_id LIKE 'ok%%'") == 11
    assert count(dsn, "SELECT count(*) FROM events WHERE external_id = 'bad'") == 0
    assert count(dsn, "SELECT count(*) FROM todos WHERE idempotency_key LIKE 'ok%%'") == 22


async def test_a_delivery_whose_webhook_was_deleted_meanwhile_is_not_found_alone(
    runtime: Runtime, dsn: str
) -> None:
    """Its token resolved, then the webhook went: a 404 for it (nothing stored), the rest
    of its batch written."""
    eps = await endpoints(runtime)
    gone = {**event("orphan"), "webhook_id": "00000000-0000-4000-8000-000000000000"}
    outs = await asyncio.gather(
        *[
            runtime.store.record_delivery(gone if i == 2 else event(f"w{i}"), TODO, eps)
            for i in range(6)
        ],
        return_exceptions=True,
    )
    assert isinstance(outs[2], NotFound) and str(outs[2]) == "unknown webhook", outs[2]
    assert all(
        isinstance(o, DeliveryOutcome) and o.new_event for i, o in enumerate(outs) if i != 2
    ), outs
    assert count(dsn, "SELECT count(*) FROM events WHERE external_id = 'orphan'") == 0
    assert count(dsn, "SELECT count(*) FROM events") == 5


async def test_a_database_lost_mid_batch_fails_the_batch_and_a_retry_writes_once(
    runtime: Runtime, dsn: str, pg_server: Any
) -> None:
    eps = await endpoints(runtime)
    # Another session holds an uncommitted event of one key: the batch's statement waits
    # on it, and the database goes while it does.
    blocker = await psycopg.AsyncConnection.connect(dsn)
    await blocker.execute(
        "INSERT INTO events (source, external_id, body, size, verified, trust_mode,"
        " disposition) VALUES ('generic', 'm2', '', 0, false, 'token', 'routed')"
    )
    # The held key first: it is flushed alone and waits; the rest queue behind it.
    keys = ["m2", "m0", "m1", "m3", "m4"]
    calls = [
        asyncio.ensure_future(runtime.store.record_delivery(event(k), TODO, eps)) for k in keys
    ]
    await asyncio.sleep(0.5)
    assert not any(c.done() for c in calls), "the batch did not wait on the held key"
    with database_refusing(pg_server, dsn):
        outs = await asyncio.gather(*calls, return_exceptions=True)
    await blocker.close()
    assert all(isinstance(o, StoreUnavailable) for o in outs), outs
    assert count(dsn, "SELECT count(*) FROM events") == 0  # nothing half-written
    assert count(dsn, "SELECT count(*) FROM todos") == 0
    # The producers retry: each delivery is written exactly once.
    for _attempt in range(20):
        try:
            retried = await asyncio.gather(
                *[runtime.store.record_delivery(event(k), TODO, eps) for k in keys]
            )
            break
        except StoreUnavailable:  # the pool is still reconnecting
            await asyncio.sleep(0.2)
    else:
        pytest.fail("the store did not recover")
    assert all(o.new_event and len(o.todos) == 2 for o in retried)
    again = await asyncio.gather(
        *[runtime.store.record_delivery(event(k), TODO, eps) for k in keys]
    )
    assert all(not o.new_event and not any(t["created"] for t in o.todos) for o in again)
    assert count(dsn, "SELECT count(*) FROM events") == 5
    assert count(dsn, "SELECT count(*) FROM todos") == 10


async def test_two_workers_batches_of_the_same_keys_do_not_deadlock(
    runtime: Runtime, dsn: str
) -> None:
    """Two stores (two workers' pools) write the same keys in opposite orders at once."""
    eps = await endpoints(runtime)
    other = Store(Database(dsn, min_size=1, max_size=4))
    await other.db.open()
    try:
        keys = [f"k{i}" for i in range(40)]
        for r in range(5):
            outs = await asyncio.gather(
                *[runtime.store.record_delivery(event(f"{k}-{r}"), TODO, eps) for k in keys],
                *[other.record_delivery(event(f"{k}-{r}"), TODO, eps) for k in reversed(keys)],
            )
            by_key: dict[str, list[DeliveryOutcome]] = {}
            for k, o in zip(keys + keys[::-1], outs, strict=True):
                by_key.setdefault(k, []).append(o)
            for pair in by_key.values():
                assert sorted(o.new_event for o in pair) == [False, True]
                assert pair[0].event_id == pair[1].event_id
                assert [t["id"] for t in pair[0].todos] == [t["id"] for t in pair[1].todos]
    finally:
        await other.db.close()
    assert count(dsn, "SELECT count(*) FROM events") == 200
    assert count(dsn, "SELECT count(*) FROM todos") == 400


async def test_ingest_batch_max_caps_a_batch(dsn: str, tmp_path: Path) -> None:
    path = tmp_path / "switchboard.toml"
    path.write_text("[ingest]\nbatch_max = 3\n")
    rt = Runtime(load_config(path, env=make_env(dsn, tmp_path / "data")))
    await rt.open_store(migrate=False)
    try:
        assert rt.store.writes.max_size == 3
        eps = await endpoints(rt, 1)
        before = batches()
        outs = await asyncio.gather(
            *[rt.store.record_delivery(event(f"cap{i}"), TODO, eps) for i in range(10)]
        )
        assert all(o.new_event for o in outs)
        assert batches()[0] - before[0] == 4  # 3 + 3 + 3 + 1
    finally:
        await rt.shutdown()
    assert load_config(env={}).section("ingest")["batch_max"] == 256


@pytest.mark.parametrize(
    ("key", "value"),
    [
        *(("batch_max", v) for v in ["0", "4097", '"many"']),
        *(("writes_in_flight", v) for v in ["0", "9", '"two"']),
    ],
)
def test_ingest_write_sizes_out_of_range_name_the_key(tmp_path: Path, key: str, value: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(f"[ingest]\n{key} = {value}\n")
    with pytest.raises(ConfigError, match=f": ingest.{key}:"):
        load_config(path, env={})


async def test_two_writes_in_flight_lose_and_double_nothing(dsn: str, tmp_path: Path) -> None:
    """``writes_in_flight = 2``: a worker's batches overlap in the database, each in its own
    transaction, as two workers' do; the same delivery in both is one event."""
    path = tmp_path / "switchboard.toml"
    path.write_text("[ingest]\nwrites_in_flight = 2\n")
    rt = Runtime(load_config(path, env=make_env(dsn, tmp_path / "data")))
    await rt.open_store(migrate=False)
    under_way = [0, 0]  # now, most
    flush = rt.store.writes._flush

    async def counted(items: Any) -> Any:
        under_way[0] += 1
        under_way[1] = max(under_way[1], under_way[0])
        try:
            return await flush(items)
        finally:
            under_way[0] -= 1

    rt.store.writes._flush = counted  # type: ignore[method-assign]
    try:
        assert rt.store.writes.flights == 2
        eps = await endpoints(rt, 2)
        keys = [f"f{i}" for i in range(30)]

        async def producer(order: list[str], pause: float) -> list[DeliveryOutcome]:
            outs = []
            for k in order:
                outs.append(await rt.store.record_delivery(event(k), TODO, eps))
                await asyncio.sleep(pause)
            return outs

        # Every key from six producers in different orders and at different paces: its
        # copies land in different batches, under way at the same time.
        orders = [
            keys,
            keys[::-1],
            *(random.Random(seed).sample(keys, len(keys)) for seed in range(4)),
        ]
        runs = await asyncio.gather(
            *(producer(order, 0.0005 * (i % 3)) for i, order in enumerate(orders))
        )
        by_key: dict[str, list[DeliveryOutcome]] = {}
        for order, outs in zip(orders, runs, strict=True):
            for k, o in zip(order, outs, strict=True):
                by_key.setdefault(k, []).append(o)
        assert sorted(by_key) == sorted(keys)
        for k, outs in by_key.items():
            assert sum(o.new_event for o in outs) == 1, k
            assert len({o.event_id for o in outs}) == 1, k
            assert len({tuple(t["id"] for t in o.todos) for o in outs}) == 1, k
    finally:
        await rt.shutdown()
    assert under_way[1] == 2
    assert count(dsn, "SELECT count(*) FROM events") == len(by_key)
    assert count(dsn, "SELECT count(*) FROM todos") == 2 * len(by_key)
    assert load_config(env={}).section("ingest")["writes_in_flight"] == 1


async def test_a_live_todo_with_the_key_is_reported_not_made_again(
    runtime: Runtime, dsn: str
) -> None:
    """The event is gone (retention) but a todo of its key is still live: a new event of the
    key reports that todo for its endpoint and makes the other endpoint's, in a batch."""
    eps = await endpoints(runtime)
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "INSERT INTO todos (endpoint_id, queue, idempotency_key, title) VALUES"
            " (%s, 'inbox', 'kept', 'old') RETURNING id::text",
            (eps[1],),
        ).fetchone()
        assert row is not None
    kept, other, again = await asyncio.gather(
        runtime.store.record_delivery(event("kept"), TODO, eps),
        runtime.store.record_delivery(event("fresh"), TODO, eps),
        runtime.store.record_delivery(event("kept"), TODO, eps),
    )
    assert kept.new_event
    assert [(t["endpoint_id"], t["created"]) for t in kept.todos] == [
        (eps[0], True),
        (eps[1], False),
    ]
    assert kept.todos[1]["id"] == row[0]
    assert other.new_event and all(t["created"] for t in other.todos)
    # A redelivery reports the todos its event made (as one across batches would).
    assert again == DeliveryOutcome(
        kept.event_id, False, False, [{**kept.todos[0], "created": False}]
    )
    assert again == await runtime.store.record_delivery(event("kept"), TODO, eps)
    assert count(dsn, "SELECT count(*) FROM todos WHERE idempotency_key = 'kept'") == 2


def test_new_ids_are_distinct_version_4_uuids_as_uuid4_writes_them() -> None:
    ids = new_ids(2000)
    assert len(set(ids)) == 2000
    variants = set()
    for text in ids:
        parsed = uuid.UUID(text)
        assert str(parsed) == text  # uuid4's own spelling: lower case, dashed
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122
        variants.add(text[19])
    assert variants == set("89ab")  # the variant's two free bits are random too
    assert new_ids(0) == []
