"""Sinks rung at commit: the statement that creates todos sends their NOTIFYs, which listeners
hear once the todos are committed, once per endpoint and queue, and never for a rollback."""

from __future__ import annotations

import logging

import psycopg
import pytest
from prometheus_client import REGISTRY
from sbdeliveries import TODO, endpoints, event, in_one_batch
from sbnotify import heard, listening

from switchboard.plugin import CommitNotify
from switchboard.routing.model import DISPOSITION_DROPPED
from switchboard.runtime import Runtime
from switchboard.store.rings import Rings


def rings_counted(sink: str) -> float:
    return REGISTRY.get_sample_value("switchboard_sink_rings_total", {"sink": sink}) or 0.0


async def test_the_runtimes_doorbell_rings_from_the_write_and_not_for_a_redelivery(
    runtime: Runtime, dsn: str
) -> None:
    eps = await endpoints(runtime)
    assert runtime.store.rings.channels == ["todo_ready"]  # the doorbell's, from the registry
    with listening(dsn, "todo_ready") as conn:
        first = await runtime.store.record_delivery(event("bell"), TODO, eps)
        assert first.new_event
        # Committed when the call returns, and rung by then: nothing waits on a sink.
        assert sorted(heard(conn)) == sorted(("todo_ready", f"{e}:inbox") for e in eps)
        again = await runtime.store.record_delivery(event("bell"), TODO, eps)
        assert not again.new_event
        dropped = await runtime.store.record_delivery(
            event("quiet", disposition=DISPOSITION_DROPPED), TODO, eps
        )
        assert dropped.dropped
        assert heard(conn) == []


async def test_a_batch_rings_each_channel_once_per_endpoint_and_queue(
    runtime: Runtime, dsn: str
) -> None:
    eps = await endpoints(runtime)
    counted: list[tuple[str, int]] = []
    runtime.store.rings = Rings(
        [
            ("a", "p", CommitNotify("bell_a", rung=lambda n: counted.append(("a", n)))),
            ("b", "p", CommitNotify("bell b")),  # any channel name PostgreSQL takes
        ]
    )
    before = rings_counted("a"), rings_counted("b")
    with listening(dsn, "bell_a", "bell b", "todo_ready") as conn:
        outs = await in_one_batch(
            runtime,
            eps,
            runtime.store.record_delivery(event("one"), TODO, eps),
            runtime.store.record_delivery(event("two"), {**TODO, "queue": "other"}, eps[:1]),
            runtime.store.record_delivery(event("one"), TODO, eps),
            runtime.store.record_delivery(event("no", disposition=DISPOSITION_DROPPED), TODO, eps),
        )
        assert [o.new_event for o in outs] == [True, True, False, True]
        # One transaction: its identical notifications are folded into one.
        rings = {f"{e}:inbox" for e in eps} | {f"{eps[0]}:other"}
        got = heard(conn)
        assert sorted(got) == sorted((c, r) for c in ("bell_a", "bell b") for r in rings)
        assert counted == [("a", 3)]
        # Each sink's series counts them, with a callback or without.
        assert (rings_counted("a"), rings_counted("b")) == (before[0] + 3, before[1] + 3)


async def test_a_write_that_rolls_back_at_commit_rings_nothing(runtime: Runtime, dsn: str) -> None:
    eps = await endpoints(runtime)
    with psycopg.connect(dsn, autocommit=True) as admin:
        # The statement (and its NOTIFYs) succeeds; the commit then fails on the second
        # endpoint's todo, so the whole transaction rolls back.
        admin.execute(
            "CREATE FUNCTION refuse_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$"
            f" BEGIN IF NEW.endpoint_id = '{eps[1]}' THEN RAISE EXCEPTION 'refused'; END IF;"
            " RETURN NULL; END $$"
        )
        admin.execute(
            "CREATE CONSTRAINT TRIGGER refuse AFTER INSERT ON todos DEFERRABLE INITIALLY"
            " DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_at_commit()"
        )
    with listening(dsn, "todo_ready") as conn:
        with pytest.raises(psycopg.Error, match="refused"):
            await runtime.store.record_delivery(event("back"), TODO, eps)
        assert heard(conn) == []
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("DROP TRIGGER refuse ON todos")
        # The producer's retry lands, and rings.
        assert (await runtime.store.record_delivery(event("back"), TODO, eps)).new_event
        assert sorted(heard(conn)) == sorted(("todo_ready", f"{e}:inbox") for e in eps)


async def test_a_failing_rung_callback_is_logged_and_the_delivery_stands(
    runtime: Runtime, dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    eps = await endpoints(runtime, 1)

    def boom(n: int) -> None:
        raise RuntimeError("counter broke")

    runtime.store.rings = Rings([("bell", "acme-bells", CommitNotify("bell", rung=boom))])
    with listening(dsn, "bell") as conn, caplog.at_level(logging.ERROR, "switchboard.store"):
        out = await runtime.store.record_delivery(event("x"), TODO, eps)
        assert out.new_event and out.todos[0]["created"]
        assert heard(conn) == [("bell", f"{eps[0]}:inbox")]
    [record] = [r for r in caplog.records if "rung callback" in r.getMessage()]
    assert record.getMessage().startswith("sink 'bell' (plugin 'acme-bells')")
    assert "counter broke" in caplog.text


async def test_without_a_commit_sink_nothing_is_rung(runtime: Runtime, dsn: str) -> None:
    eps = await endpoints(runtime, 1)
    runtime.store.rings = Rings()
    with listening(dsn, "todo_ready") as conn:
        assert (await runtime.store.record_delivery(event("y"), TODO, eps)).new_event
        assert heard(conn) == []
