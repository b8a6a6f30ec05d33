"""The background jobs of ``serve`` against a frozen or restarted PostgreSQL: the deferred
llm stage's triage worker and the retention job.

With the database frozen (SIGSTOP on all its processes) or restarted while events are
pending and model calls are in flight, every pending event is decided exactly once after
it comes back (one todo each, nothing left pending, no provider slot held), within its
lease, and the log shows one line per failed wait, never a traceback. A SIGTERM while it
is frozen stops ``serve`` well within its shutdown grace. The retention job, frozen
mid-prune, fails its run in one line and prunes the rest once the database is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from fakeai import FakeAI
from sbfaults import PrivatePostgres, deliver, timed
from sbllm import API_KEY, KEY_ENV, Tenant, burst, decided, llm_toml, own_tenant
from sbtest import CLI, Server
from sbworld import World

pytestmark = pytest.mark.slow

GOOD = {"queue": "triage", "confidence": 0.92, "reason": "a crash report"}
MAX_IN_FLIGHT = 4
MAX_TIMEOUT_MS = 4000
#: A run's lease: the stage's budget (max_timeout_ms + 5 s) plus the worker's 5 s margin.
LEASE_S = MAX_TIMEOUT_MS / 1000 + 5 + 5
#: How long the database stays frozen (the issue's "5-10 s").
FROZEN_S = 8.0
#: What a frozen database may cost a stop (server.shutdown_grace_s, set so: the old worker
#: took 11-17 s, waiting 5 s for each cancel request the frozen server never answered).
SHUTDOWN_GRACE_S = 10


@pytest.fixture(scope="module")
def fake_ai() -> Iterator[FakeAI]:
    fake = FakeAI().start()
    yield fake
    fake.stop()


def _config(fault_config: Any, fake: FakeAI, database_timeout_ms: int = 2000, **llm: Any) -> Path:
    settings = {"max_in_flight": MAX_IN_FLIGHT, "max_timeout_ms": MAX_TIMEOUT_MS, **llm}
    path: Path = fault_config(
        f"[server]\ndatabase_timeout_ms = {database_timeout_ms}\n"
        f"shutdown_grace_s = {SHUTDOWN_GRACE_S}\n"
        + llm_toml(fake.base_url, mode="deferred", **settings)
    )
    return path


async def _opted_in(srv: Server, fake: FakeAI, n: int, delay: float) -> tuple[Tenant, str]:
    async with own_tenant(srv, n, "bg") as t:
        model = fake.on(t.model("bg"), GOOD, delay=delay)
        await t.triage(model, timeout_ms=MAX_TIMEOUT_MS, prompt_budget_per_minute=60)
    return t, model


def _held(dsn: str) -> tuple[int, int]:
    """Pending events left, and provider slots still held."""
    with psycopg.connect(dsn) as conn:
        pending = conn.execute("SELECT count(*) FROM pending_events").fetchone()
        slots = conn.execute("SELECT count(*) FROM llm_in_flight WHERE until > now()").fetchone()
    assert pending is not None and slots is not None
    return int(pending[0]), int(slots[0])


def _assert_decided_once(events: list[dict[str, Any]]) -> None:
    for event in events:
        assert event["disposition"] == "routed" and event["queued"] == 0, event
        assert event["trace"]["stage"] == "llm", event["trace"]
        assert [q for q, _ in event["todos"]] == ["triage"], event


def _assert_quiet(log: str) -> None:
    """One line per failed wait: no traceback, no task left with its exception."""
    assert "Traceback" not in log and "never retrieved" not in log, log[-4000:]


@pytest.mark.parametrize("fault", ["frozen", "restarted"])
async def test_a_busy_worker_decides_every_pending_event_once_after_the_database_returns(
    server_factory: Any,
    private_pg: PrivatePostgres,
    private_dsn: str,
    fault_config: Any,
    fake_ai: FakeAI,
    monkeypatch: Any,
    fault: str,
) -> None:
    """A backlog claimed four at a time against a quick model: when the fault comes, runs
    are inside every step (a claim, the stage's reads, its slot and budget, the model
    call, the decision's write). A run the outage made wait ("not yet") whose postponement
    could not be written either used to end its task with an exception nobody read (a
    traceback in the log)."""
    monkeypatch.setenv(KEY_ENV, API_KEY)
    srv = server_factory(
        private_dsn, config=_config(fault_config, fake_ai), env_extra={KEY_ENV: API_KEY}
    )
    t, model = await _opted_in(srv, fake_ai, 1 if fault == "frozen" else 2, delay=0.05)
    n = 24
    await burst(t, n, "b")
    deadline = time.monotonic() + 10
    while len(fake_ai.requests(model)) < MAX_IN_FLIGHT and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.3)  # the worker at full speed
    if fault == "frozen":
        with private_pg.frozen():
            await asyncio.sleep(FROZEN_S)
    else:
        private_pg.outage(3.0)  # every session ends; back on the same socket
    back = time.monotonic()
    events = decided(t, [f"b{i}" for i in range(n)], timeout=LEASE_S + 30)
    took = time.monotonic() - back
    print(f"\n{fault}: {n} decided {took:.1f} s after the database came back")
    _assert_decided_once(events)
    # A run cut off mid-way is taken over once its lease ran out: never later.
    assert took < LEASE_S + 10, took
    deadline = time.monotonic() + LEASE_S
    while _held(private_dsn) != (0, 0):
        assert time.monotonic() < deadline, _held(private_dsn)
        await asyncio.sleep(0.2)
    _assert_quiet(srv.log.read_text())


async def test_sigterm_with_the_database_frozen_stops_within_the_grace_and_loses_nothing(
    server_factory: Any,
    private_pg: PrivatePostgres,
    private_dsn: str,
    fault_config: Any,
    fake_ai: FakeAI,
    monkeypatch: Any,
) -> None:
    """SIGTERM with the worker's four model calls in flight and four events pending, the
    database frozen: the runs are cut and their leases (unwritable) run out; a stop cancelling a
    run inside a statement must not wait on psycopg's cancel request (5 s each, never
    answered by a frozen server). After the thaw a new serve decides each event once."""
    monkeypatch.setenv(KEY_ENV, API_KEY)
    config = _config(fault_config, fake_ai)
    first = server_factory(private_dsn, config=config, env_extra={KEY_ENV: API_KEY})
    t, model = await _opted_in(first, fake_ai, 3, delay=2.0)
    n = 2 * MAX_IN_FLIGHT  # as many calls in flight as may be, as many more pending
    await burst(t, n, "s")
    deadline = time.monotonic() + 10
    while len(fake_ai.requests(model)) < MAX_IN_FLIGHT and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    with private_pg.frozen():
        await asyncio.sleep(1.0)  # the answers come; their writes meet the frozen database
        took, _ = timed(first.stop)  # SIGTERM, then waits for the whole process group
    print(f"\nstopped {took:.2f} s after SIGTERM, the database frozen")
    assert took < SHUTDOWN_GRACE_S, took
    _assert_quiet(first.log.read_text())

    second = server_factory(private_dsn, config=config, env_extra={KEY_ENV: API_KEY})
    t.srv = second
    events = decided(t, [f"s{i}" for i in range(n)], timeout=LEASE_S + 30)
    _assert_decided_once(events)
    assert _held(private_dsn)[0] == 0
    _assert_quiet(second.log.read_text())


def _copies_of_the_event(dsn: str, n: int, days_old: int) -> None:
    """``n`` copies of the one stored event, all ``days_old`` days old (test data)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        cols = ", ".join(
            str(r[0])
            for r in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'events'"
                " AND column_name NOT IN ('id', 'external_id')"
            ).fetchall()
        )
        conn.execute(
            f"INSERT INTO events ({cols}, external_id)"
            f" SELECT {cols}, external_id || ':' || g FROM events, generate_series(1, %s) g",
            (n,),
        )
        conn.execute(
            "UPDATE events SET received_at = received_at - make_interval(days => %s)",
            (days_old,),
        )


def _events(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM events").fetchone()
    assert row is not None
    return int(row[0])


#: Old events to prune: about 2 s of pruning left at the thaw.
COPIES = 10000
#: Long enough for two of the pruner's runs to fail (each waits its 2 s deadline).
PRUNE_FROZEN_S = 5.0


async def test_the_retention_job_frozen_mid_prune_fails_in_one_line_and_resumes(
    server_factory: Any, private_pg: PrivatePostgres, private_dsn: str, fault_config: Any
) -> None:
    plain = server_factory(private_dsn)
    w = World(CLI(plain.env), prefix="prune-")
    w.human("alice")
    w.endpoint("alice", "owner")
    url = w.webhook("owner", "generic")["ingest_url"]
    with httpx.Client(timeout=30) as http:
        assert deliver(http, url, "old").status_code == 202
    plain.stop()
    _copies_of_the_event(private_dsn, COPIES, days_old=40)
    config = fault_config(
        "[server]\ndatabase_timeout_ms = 2000\n"
        "[retention]\nevents_days = 30\ninterval_s = 0.5\nbatch_size = 100\n"
    )
    srv = server_factory(private_dsn, config=config)
    deadline = time.monotonic() + 20
    while _events(private_dsn) > COPIES + 1 - 500:  # mid-prune: batches paced, seconds to go
        assert time.monotonic() < deadline, srv.log.read_text()[-3000:]
        await asyncio.sleep(0.05)
    with private_pg.frozen():
        await asyncio.sleep(PRUNE_FROZEN_S)
    frozen_left = _events(private_dsn)
    assert frozen_left > 0  # the freeze came mid-prune
    back = time.monotonic()
    while _events(private_dsn) > 0:
        assert time.monotonic() - back < 60, srv.log.read_text()[-3000:]
        await asyncio.sleep(0.2)
    print(f"\n{frozen_left} left at the thaw, pruned {time.monotonic() - back:.1f} s after")
    log = srv.log.read_text()
    failed = [line for line in log.splitlines() if "retention: prune run failed" in line]
    # One line a run (each waits its deadline, 2 s, then the interval): never a spin.
    assert 1 <= len(failed) <= PRUNE_FROZEN_S / 2 + 1, failed
    _assert_quiet(log)
    # The pruner's stop with the database frozen is bounded too.
    with private_pg.frozen():
        took, _ = timed(srv.stop)
    assert took < SHUTDOWN_GRACE_S, took


#: The outage tests' model call ceiling: a run's budget of 19 s (5 s more), room for the
#: database to stop, stay down and start again within it.
OUTAGE_TIMEOUT_MS = 14000
#: The line the host logs when an outage cut a run off (its stage said "not yet") and the
#: postponement did not reach the database at once.
CUT_OFF = "not postponed yet, the database is unavailable"
#: Where a held row makes the next run wait, inside the stage, before the model is asked:
#: its provider's only call slot (before taking it), or its endpoint's day budget (the slot
#: taken, and not given back while the database is away).
HELD = {
    "slot": (
        "llm_in_flight",
        "INSERT INTO llm_in_flight (provider, slot, token, holder, until)"
        " VALUES ('fake', 1, gen_random_uuid(), 'test', '-infinity')",
    ),
    "budget": (
        "llm_triage_budget",
        "INSERT INTO llm_triage_budget (endpoint_id, span, window_start, used)"
        " VALUES (%s, 'day', date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', 0)",
    ),
}


def _waits_on(dsn: str, table: str) -> bool:
    """Whether a statement on ``table`` waits for a lock."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND query LIKE %s",
            (f"%{table}%",),
        ).fetchone()
    return row is not None and int(row[0]) > 0


async def _cut_before_the_model(
    srv: Server, private_pg: PrivatePostgres, dsn: str, fake: FakeAI, **kw: Any
) -> tuple[dict[str, Any], int, str]:
    """One delivery whose run waits on a row a transaction holds (``hold``, a key of
    :data:`HELD`) when the ``fault`` (``restarted``: down ``down_s``; ``frozen``: for
    ``down_s``) cuts it off; its decision's trace, how often the model was asked, and the
    server's log. ``n``: the tenant's number (the fake counts calls per model name)."""
    async with own_tenant(srv, kw["n"], "out") as t:
        model = fake.on(t.model("out"), GOOD)
        await t.triage(model, timeout_ms=kw["timeout_ms"])
    table, insert = HELD[kw["hold"]]
    holder = psycopg.connect(dsn)  # a transaction, left open until the fault is over
    try:
        holder.execute(insert, (t.owner,) if "%s" in insert else ())
        t.deliver({"title": "Crash on start", "kind": "bug"}, "o1")
        deadline = time.monotonic() + 20
        while not _waits_on(dsn, table):
            assert time.monotonic() < deadline, srv.log.read_text()[-3000:]
            await asyncio.sleep(0.05)
        if kw["fault"] == "frozen":
            with private_pg.frozen():
                await asyncio.sleep(kw["down_s"])
        else:
            # Every session ends at once: the holder's, and the run's waiting for its row
            # (a fast stop let that run's statement take the row and commit first, now and
            # then: the run then went on to the model, uncut).
            private_pg.outage(kw["down_s"], mode="immediate")
    finally:
        with contextlib.suppress(psycopg.Error):
            holder.rollback()
        with contextlib.suppress(psycopg.Error):
            holder.close()
    [event] = decided(t, ["o1"], timeout=kw["timeout_ms"] / 1000 + 10 + 30)
    assert [q for q, _ in event["todos"]] == ["triage"], event
    trace, asked = event["trace"], len(fake.requests(model))
    print(f"\n{kw}: {trace.get('cause') or trace['stage']}, {trace['deferred']}, asked {asked}")
    log = srv.log.read_text()
    assert CUT_OFF in log, log[-3000:]  # the fault did cut the run off, as meant
    _assert_quiet(log)
    return trace, asked, log


@pytest.mark.parametrize(("fault", "hold"), [("frozen", "slot"), ("restarted", "budget")])
async def test_a_run_cut_off_by_an_outage_before_the_model_spends_no_attempt(
    server_factory: Any,
    private_pg: PrivatePostgres,
    private_dsn: str,
    fault_config: Any,
    fake_ai: FakeAI,
    monkeypatch: Any,
    fault: str,
    hold: str,
) -> None:
    """One attempt allowed, and the database goes away while the run waits inside the
    stage: restarted (down 4 s) or frozen (8 s), longer than the store's waits (2 s each)
    the cut run still makes, so a postponement written at once finds no database. The
    run used to keep its lease (its postponement unwritten), so the next claim was its
    second: the default, ``llm_error`` "no decision after 1 attempts", the model never
    asked. The host now tries the postponement again until the lease runs out, so the
    event is postponed with its attempt back; the provider slot the cut run held is given
    back by the next run before it takes one."""
    monkeypatch.setenv(KEY_ENV, API_KEY)
    timeout_ms = OUTAGE_TIMEOUT_MS
    config = _config(
        fault_config, fake_ai, max_timeout_ms=timeout_ms, max_attempts=1, fake_max_in_flight=1
    )
    srv = server_factory(private_dsn, config=config, env_extra={KEY_ENV: API_KEY})
    n = len(fault) * 10 + len(hold)
    trace, asked, log = await _cut_before_the_model(
        srv, private_pg, private_dsn, fake_ai, fault=fault, hold=hold, n=n,
        timeout_ms=timeout_ms, down_s=8.0 if fault == "frozen" else 4.0,
    )  # fmt: skip
    # Decided by the model, on its first attempt: the outage cost none.
    assert trace["stage"] == "llm" and trace["action"] == {"queue": "triage"}, trace
    assert trace["deferred"]["attempts"] == 1 and asked == 1, (trace, asked)
    # The slot the cut run held went back once the database answered: it did not hold
    # the provider's only call (and the event) until its lease ran out.
    assert "calls in flight" not in log


async def test_an_outage_past_the_runs_budget_still_spends_the_attempt_never_more(
    server_factory: Any,
    private_pg: PrivatePostgres,
    private_dsn: str,
    fault_config: Any,
    fake_ai: FakeAI,
    monkeypatch: Any,
) -> None:
    """Frozen longer than the run's lease: the postponement's tries end with it (one line),
    the attempt counts as for a worker that died (the bound holds), and the next claim asks
    the model."""
    monkeypatch.setenv(KEY_ENV, API_KEY)
    timeout_ms = 2000  # a stage budget of 7 s, a lease of 12 s: shorter than the freeze
    config = _config(
        fault_config, fake_ai, max_timeout_ms=timeout_ms, max_attempts=2, fake_max_in_flight=1
    )
    srv = server_factory(private_dsn, config=config, env_extra={KEY_ENV: API_KEY})
    trace, asked, log = await _cut_before_the_model(
        srv, private_pg, private_dsn, fake_ai, fault="frozen", hold="slot", n=0,
        timeout_ms=timeout_ms, down_s=14.0,
    )  # fmt: skip
    assert trace["stage"] == "llm" and trace["action"] == {"queue": "triage"}, trace
    assert trace["deferred"]["attempts"] == 2 and asked == 1, (trace, asked)
    assert "not postponed, the database is unavailable" in log
