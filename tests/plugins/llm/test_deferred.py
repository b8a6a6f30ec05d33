"""The deferred llm stage on the live path: the producer's 202 never waits for the model.

A real server in the default ``mode = "deferred"`` stores the delivery ``pending`` and
answers at once; its triage worker asks the fake OpenAI-compatible server (at most
``max_in_flight`` at once, as the fake counts) and writes the decision and todos exactly
once. A redelivery while pending is answered from the store and asks nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest
from fakeai import FakeAI
from sbllm import QUEUES, Tenant, burst, decided, event_of, events_of, fresh_minute, llm_toml
from sbtest import CLI

from switchboard.routing.trace import validate_trace
from switchboard.runtime import Runtime
from switchboard.service import identity, webhooks
from switchboard.service import rules as rules_svc

GOOD = {"queue": "triage", "confidence": 0.92, "reason": "a crash report"}
ISSUE = {"title": "Crash on start", "kind": "bug"}
MAX_IN_FLIGHT = 4


@pytest.fixture(scope="module")
def llm_config(fake_ai: FakeAI, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This module's server defers the llm stage (the default mode, written out)."""
    path = tmp_path_factory.mktemp("llm-deferred") / "sb.toml"
    path.write_text(
        llm_toml(
            fake_ai.base_url, mode="deferred", max_in_flight=MAX_IN_FLIGHT, max_timeout_ms=5000
        )
    )
    return path


async def test_a_delivery_goes_pending_then_the_worker_decides(
    tenant: Tenant, fake_ai: FakeAI
) -> None:
    t = tenant
    model = fake_ai.on(t.model("good"), GOOD)
    await t.triage(model)

    reply = t.deliver(ISSUE, "d1")
    assert reply["disposition"] == "pending" and reply["todos"] == [] and reply["created"] == 0
    [event] = decided(t, ["d1"])
    assert reply["event_id"] == event["id"]
    trace = event["trace"]
    validate_trace(trace)
    assert event["disposition"] == "routed" and event["queued"] == 0
    assert trace["stage"] == "llm" and trace["action"] == {"queue": "triage"}
    assert trace["llm"]["queue"] == "triage"
    assert trace["deferred"]["stage"] == "llm" and trace["deferred"]["attempts"] == 1
    assert trace["deferred"]["waited_ms"] >= 0
    assert event["todos"] == [("triage", trace)]
    assert len(fake_ai.requests(model)) == 1

    # A redelivery after the decision reports its todo, as any redelivery does.
    again = t.deliver(ISSUE, "d1")
    assert [x["queue"] for x in again["todos"]] == ["triage"] and again["created"] == 0
    assert len(fake_ai.requests(model)) == 1


async def test_a_redelivery_while_pending_asks_nothing(tenant: Tenant, fake_ai: FakeAI) -> None:
    t = tenant
    model = fake_ai.on(t.model("slow"), GOOD, delay=2.0)
    await t.triage(model, timeout_ms=4000)
    first = t.deliver(ISSUE, "same")
    again = t.deliver(ISSUE, "same")
    assert first["disposition"] == again["disposition"] == "pending"
    assert again["event_id"] == first["event_id"] and again["todos"] == []
    [event] = decided(t, ["same"])
    assert [q for q, _ in event["todos"]] == ["triage"]
    assert len(fake_ai.requests(model)) == 1


async def test_what_the_rules_decide_never_goes_pending(tenant: Tenant, fake_ai: FakeAI) -> None:
    t = tenant
    await rules_svc.set_rules(
        t.rt,
        None,
        t.hook["webhook_id"],
        [{"id": "bugs", "expr": '.payload.kind == "bug"', "action": {"queue": "review"}}],
    )
    model = fake_ai.on(t.model("unused"), GOOD)
    await t.triage(model)
    reply = t.deliver(ISSUE, "r1")
    assert "disposition" not in reply and [x["queue"] for x in reply["todos"]] == ["review"]
    # Nor does a delivery the model would not be asked about (no opt-in).
    from switchboard_llm import service

    await service.set_triage(t.rt, t.owner, None)
    reply = t.deliver({"kind": "other"}, "r2")
    assert [x["queue"] for x in reply["todos"]] == ["inbox"]
    assert fake_ai.requests(model) == []


async def test_a_fallback_is_written_by_the_worker_too(tenant: Tenant, fake_ai: FakeAI) -> None:
    t = tenant
    model = fake_ai.on(t.model("broken"), status=500)
    await t.triage(model)
    assert t.deliver(ISSUE, "f1")["disposition"] == "pending"
    [event] = decided(t, ["f1"])
    trace = event["trace"]
    validate_trace(trace)
    assert trace["stage"] == "default" and trace["cause"] == "llm_error"
    assert event["todos"] == [("inbox", trace)]


async def test_a_slow_model_never_slows_the_producer(tenant: Tenant, fake_ai: FakeAI) -> None:
    t = tenant
    model = fake_ai.on(t.model("burst"), GOOD, delay=1.0)
    await t.triage(model, timeout_ms=3000, prompt_budget_per_minute=60)
    n = 12
    started = time.monotonic()
    latencies = await burst(t, n, "b")
    assert max(latencies) < 1.0, latencies  # each 202 came before any model answered
    events = decided(t, [f"b{i}" for i in range(n)])
    took = time.monotonic() - started
    assert all(e["disposition"] == "routed" and len(e["todos"]) == 1 for e in events)
    assert len(fake_ai.requests(model)) == n  # each asked once
    assert fake_ai.peak(model) <= MAX_IN_FLIGHT
    assert took >= n / MAX_IN_FLIGHT * 1.0 * 0.9  # the cap held the calls back


async def test_after_max_attempts_the_default_says_so(tenant: Tenant, fake_ai: FakeAI) -> None:
    t = tenant
    model = fake_ai.on(t.model("lost"), GOOD, delay=2.5)
    await t.triage(model, timeout_ms=4000)
    reply = t.deliver(ISSUE, "lost-1")
    deadline = time.monotonic() + 10
    while not fake_ai.requests(model) and time.monotonic() < deadline:
        time.sleep(0.05)
    # As if this were the third claim whose worker died: its lease has run out.
    with psycopg.connect(t.srv.env["SWITCHBOARD_DATABASE_URL"], autocommit=True) as conn:
        conn.execute(
            "UPDATE pending_events SET attempts = 3, lease_owner = 'gone',"
            " lease_until = '-infinity' WHERE event_id = %s",
            (reply["event_id"],),
        )
    [event] = decided(t, ["lost-1"])
    trace = event["trace"]
    validate_trace(trace)
    assert trace["stage"] == "default" and trace["cause"] == "llm_error"
    assert "after 3 attempts" in trace["llm"]["detail"]
    assert trace["deferred"] == {**trace["deferred"], "stage": "llm", "attempts": 3}
    assert event["todos"] == [("inbox", trace)]
    time.sleep(2.6)  # the first call's answer comes: it no longer holds the lease
    assert [q for q, _ in event_of(t, "lost-1")["todos"]] == ["inbox"]
    assert len(fake_ai.requests(model)) == 1


async def test_a_run_cut_off_before_any_stage_spends_no_attempt(
    tenant: Tenant, fake_ai: FakeAI
) -> None:
    """The database away while the worker reads the event's webhook, before any stage ran
    (that read waits on a lock past the store's 2 s deadline): the event is postponed with
    its attempt given back, as a stage's own outage is. It used to keep its lease (15 s
    here) and be claimed again as its second attempt."""
    t = tenant
    model = fake_ai.on(t.model("unread"), GOOD)
    await t.triage(model)
    t.deliver(ISSUE, "warm")  # the receiver keeps the webhook's resolution from here on
    decided(t, ["warm"])
    dsn = t.srv.env["SWITCHBOARD_DATABASE_URL"]
    with psycopg.connect(dsn) as holder:
        # Read by the worker's resolution of the webhook, never by a kept one's delivery.
        holder.execute("LOCK TABLE webhook_routes IN ACCESS EXCLUSIVE MODE")
        reply = t.deliver(ISSUE, "cut")
        assert reply["disposition"] == "pending", reply
        deadline = time.monotonic() + 20
        while f"event {reply['event_id']} waits" not in t.srv.log.read_text():
            assert time.monotonic() < deadline, t.srv.log.read_text()[-3000:]
            time.sleep(0.1)
        holder.rollback()
    [event] = decided(t, ["cut"])
    assert event["trace"]["stage"] == "llm", event["trace"]
    assert event["trace"]["deferred"]["attempts"] == 1, event["trace"]
    assert len(fake_ai.requests(model)) == 2  # "warm", then "cut" once


async def test_metrics_show_the_queue_the_wait_and_the_tokens(
    tenant: Tenant, fake_ai: FakeAI
) -> None:
    import httpx

    def waited_sum() -> float:
        text = httpx.get(t.srv.base_url + "/metrics", timeout=10).text
        rows = [x for x in text.splitlines() if x.startswith("switchboard_deferred_seconds_sum")]
        return sum(float(x.split()[-1]) for x in rows if 'stage="llm"' in x)

    t = tenant
    model = fake_ai.on(t.model("metered"), GOOD, delay=1.5)
    await t.triage(model, timeout_ms=4000)
    before = waited_sum()
    t.deliver(ISSUE, "m1")
    text = httpx.get(t.srv.base_url + "/metrics", timeout=10).text
    [line] = [
        x for x in text.splitlines() if x.startswith('switchboard_pending_events{stage="llm"}')
    ]
    assert float(line.split()[-1]) >= 1
    from switchboard_llm import service

    view = await service.get_triage(t.rt, t.owner)  # `switchboard llm get`: the queue depth
    assert view["mode"] == "deferred" and view["pending"] == 1
    [event] = decided(t, ["m1"])
    # Receipt to decision: the model's 1.5 s are in the wait, in the trace and the histogram.
    assert event["trace"]["deferred"]["waited_ms"] >= 1500
    assert waited_sum() - before >= 1.5
    # The fake's usage, counted in the day's window (the minute's may have turned since the
    # call, and the count may land just after the decision: polled, not timed).
    deadline = time.monotonic() + 5
    while True:
        view = await service.get_triage(t.rt, t.owner)
        if view["tokens"]["day"] == 2 or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
    assert view["pending"] == 0 and view["tokens"]["day"] == 2, view
    text = httpx.get(t.srv.base_url + "/metrics", timeout=10).text
    assert 'switchboard_deferred_seconds_count{stage="llm"}' in text
    prompt = [
        x for x in text.splitlines() if x.startswith('switchboard_llm_tokens_total{kind="prompt"}')
    ]
    assert prompt and float(prompt[0].split()[-1]) >= 1


async def test_a_dry_run_says_a_live_delivery_would_go_pending(
    tenant: Tenant, fake_ai: FakeAI
) -> None:
    t = tenant
    model = fake_ai.on(t.model("dry"), GOOD)
    await t.triage(model)
    skipped = await rules_svc.test_rules(t.rt, None, t.hook["webhook_id"], payload=ISSUE)
    assert skipped["pending"] == "llm" and skipped["trace"]["stage"] == "default"
    assert fake_ai.requests(model) == []
    ran = await rules_svc.test_rules(t.rt, None, t.hook["webhook_id"], payload=ISSUE, llm="run")
    assert ran["pending"] == "llm" and ran["trace"]["stage"] == "llm"
    assert ran["decision"]["queue"] == "triage" and len(fake_ai.requests(model)) == 1
    # A rule that decides first: nothing would wait.
    await rules_svc.set_rules(
        t.rt,
        None,
        t.hook["webhook_id"],
        [{"id": "bugs", "expr": '.payload.kind == "bug"', "action": {"queue": "review"}}],
    )
    ruled = await rules_svc.test_rules(t.rt, None, t.hook["webhook_id"], payload=ISSUE)
    assert "pending" not in ruled and ruled["trace"]["stage"] == "rule"


async def test_on_budget_wait_leaves_the_event_pending_until_the_window_turns(
    tenant: Tenant, fake_ai: FakeAI
) -> None:
    t = tenant
    model = fake_ai.on(t.model("waits"), GOOD)
    await t.triage(model, prompt_budget_per_minute=1, on_budget="wait")
    t.deliver(ISSUE, "w1")
    decided(t, ["w1"])
    reply = t.deliver(ISSUE, "w2")
    deadline = time.monotonic() + 10
    row = None
    while time.monotonic() < deadline:
        with psycopg.connect(t.srv.env["SWITCHBOARD_DATABASE_URL"]) as conn:
            row = conn.execute(
                "SELECT attempts, lease_owner, lease_until > now() + interval '0.5 s'"
                " FROM pending_events WHERE event_id = %s",
                (reply["event_id"],),
            ).fetchone()
        if row is None or (row[1] is None and row[2]):
            break
        time.sleep(0.1)
    if row is None:  # the test crossed a minute boundary: the new minute's prompt decided it
        assert event_of(t, "w2")["trace"]["stage"] == "llm"
        return
    # Given back until the next minute: no call, no fallback, the attempt uncounted.
    assert row == (0, None, True)
    assert event_of(t, "w2")["disposition"] == "pending"
    assert len(fake_ai.requests(model)) == 1


@pytest.mark.parametrize("on_budget", ["default", "wait"])
async def test_a_token_budget_holds_against_calls_running_at_once(
    tenant: Tenant, fake_ai: FakeAI, on_budget: str
) -> None:
    """1,000 tokens a minute against 300 a call: 3 calls that minute, although the
    worker runs MAX_IN_FLIGHT at once (each holds its estimate until its usage is in)."""
    t = tenant
    usage = {"prompt_tokens": 200, "completion_tokens": 100, "total_tokens": 300}
    model = fake_ai.on(t.model(f"tok-{on_budget}"), GOOD, usage=usage, delay=0.3)
    await t.triage(
        model, token_budget_per_minute=1000, prompt_budget_per_minute=60, on_budget=on_budget
    )
    fresh_minute(need=15)  # the wait case: its 3 calls, then 2 s more
    n = 8
    await burst(t, n, f"tb-{on_budget}-")
    deliveries = [f"tb-{on_budget}-{i}" for i in range(n)]
    if on_budget == "default":
        events = decided(t, deliveries)
        causes = sorted(e["trace"].get("cause") or e["trace"]["stage"] for e in events)
        assert causes == ["llm"] * 3 + ["llm_budget_exhausted"] * (n - 3)
        spent = [e for e in events if e["trace"].get("cause") == "llm_budget_exhausted"]
        assert all(
            e["trace"]["llm"]["detail"] == "the minute's budget of 1000 tokens is spent"
            for e in spent
        )
    else:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            events = events_of(t, deliveries)
            if sum(e["disposition"] != "pending" for e in events) >= 3:
                break
            time.sleep(0.1)
        time.sleep(2.0)  # time for a fourth call, were one let through
        events = events_of(t, deliveries)
        assert sorted(e["disposition"] for e in events).count("pending") == n - 3
        assert all(e["trace"]["stage"] == "llm" for e in events if e["disposition"] != "pending")
    assert len(fake_ai.requests(model)) == 3  # the fake counts the calls that minute
    assert fake_ai.peak(model) <= MAX_IN_FLIGHT


@contextlib.asynccontextmanager
async def _provider_busy(rt: Runtime) -> AsyncIterator[None]:
    """Every call slot of provider ``fake`` taken (as other servers' calls would): a
    pending event stays pending, claimed again every half second, until they are given back."""
    from switchboard_llm import store
    from switchboard_llm.settings import DEFAULT_PROVIDER_IN_FLIGHT

    tokens: list[str] = []
    deadline = time.monotonic() + 15
    # (Another test's event may hold a slot a moment: its call ends, its slot is taken.)
    while len(tokens) < DEFAULT_PROVIDER_IN_FLIGHT and time.monotonic() < deadline:
        token = await store.take_slot(rt, "fake", DEFAULT_PROVIDER_IN_FLIGHT, 60, "test")
        if token is None:
            await asyncio.sleep(0.1)
        else:
            tokens.append(token)
    try:
        assert len(tokens) == DEFAULT_PROVIDER_IN_FLIGHT
        yield
    finally:
        for token in tokens:
            await store.give_slot(rt, token)


async def test_a_grant_revoked_while_pending_is_not_offered(
    tenant: Tenant, fake_ai: FakeAI
) -> None:
    t = tenant
    pool = t.w.endpoint("alice", "pool", queues="lane-m")
    model = fake_ai.on(t.model("revoked"), {"queue": "lane-m", "confidence": 0.9, "reason": "r"})
    await t.triage(model, queues=[*QUEUES, {"name": "lane-m", "description": "medium work"}])
    async with _provider_busy(t.rt):
        assert t.deliver(ISSUE, "rv1")["disposition"] == "pending"
        await asyncio.sleep(1.0)  # claimed and put back at least once
        assert event_of(t, "rv1")["disposition"] == "pending" and not fake_ai.requests(model)
        await identity.revoke_endpoint(t.rt, pool["endpoint_id"])
        # A claim that read the grant before the revocation finds no slot and puts the
        # event back; each claim after it reads the grant as revoked.
        await asyncio.sleep(1.0)
    [event] = decided(t, ["rv1"])
    # The grant as it is at the decision: lane-m is neither offered nor taken.
    [request] = fake_ai.requests(model)
    assert request.prompt_doc["queues"] == QUEUES
    assert event["trace"]["cause"] == "llm_unknown_queue"
    assert [q for q, _ in event["todos"]] == ["inbox"]


async def test_a_webhook_deleted_while_pending_is_dropped_without_a_call(
    tenant: Tenant, fake_ai: FakeAI
) -> None:
    t = tenant
    model = fake_ai.on(t.model("orphan"), GOOD)
    await t.triage(model)
    async with _provider_busy(t.rt):
        assert t.deliver(ISSUE, "del1")["disposition"] == "pending"
        await webhooks.delete_webhook(t.rt, None, t.hook["webhook_id"])
        # Decided with every call slot still taken: an orphan needs no model.
        [event] = await asyncio.to_thread(decided, t, ["del1"])
    assert event["disposition"] == "dropped", event
    assert event["todos"] == [] and event["queued"] == 0
    trace = event["trace"]
    validate_trace(trace)
    assert trace["stage"] == "default" and trace["action"] == {"drop": True}
    assert trace["faults"][0]["detail"] == "the webhook was deleted while pending"
    assert fake_ai.requests(model) == []


async def test_events_list_shows_how_long_a_pending_event_has_waited(
    tenant: Tenant, fake_ai: FakeAI
) -> None:
    t = tenant
    model = fake_ai.on(t.model("listed"), GOOD)
    await t.triage(model)
    cli, wid = CLI(t.srv.env).fast(), t.hook["webhook_id"]
    async with _provider_busy(t.rt):
        t.deliver(ISSUE, "ls1")
        await asyncio.sleep(1.2)
        doc = await asyncio.to_thread(cli.json, "events", "list", "--webhook", wid)
        [event] = doc["events"]
        assert event["disposition"] == "pending" and 1.2 <= event["waiting_s"] < 30
        table = await asyncio.to_thread(
            CLI(dict(t.srv.env, COLUMNS="160"), in_process=True).run,
            "events", "list", "--webhook", wid, "--table",
        )  # fmt: skip
        assert "WAITING" in table.stdout
        [row] = [x for x in table.stdout.splitlines() if "pending" in x]
        assert re.search(r"\b\d+s\b", row), row
    decided(t, ["ls1"])
    # Decided: no wait to show any more (the field is only a pending event's).
    [event] = CLI(t.srv.env).fast().json("events", "list", "--webhook", wid)["events"]
    assert event["disposition"] == "routed" and "waiting_s" not in event


async def test_a_providers_slots_are_shared_and_lapse(llm_runtime: Runtime) -> None:
    """The cap's bookkeeping in PostgreSQL: ``cap`` slots at once for every server, a
    slot given back is free at once, and a killed holder's lapses at its lease."""
    from switchboard_llm import store

    rt, provider = llm_runtime, f"cap-{time.monotonic_ns()}"
    held = [await store.take_slot(rt, provider, 2, 30, "a") for _ in range(2)]
    assert all(held) and await store.take_slot(rt, provider, 2, 30, "b") is None
    assert await store.slots_in_use(rt, provider) == 2
    await store.give_slot(rt, str(held[0]))
    assert await store.take_slot(rt, provider, 2, 30, "b") is not None
    # Racing takers never pass the cap: the provider's lock orders them.
    other = f"{provider}-race"
    taken = await asyncio.gather(*(store.take_slot(rt, other, 3, 30, "r") for _ in range(12)))
    # (two that pick one free slot at once: one of them reads busy, and is asked again)
    assert 1 <= sum(t is not None for t in taken) <= 3
    while await store.take_slot(rt, other, 3, 30, "r") is not None:
        pass
    assert await store.slots_in_use(rt, other) == 3
    # A killed holder never gives its slot back: the slot lapses at its lease's end.
    lapsing = f"{provider}-lapse"
    killed = await store.take_slot(rt, lapsing, 1, 30, "killed")
    assert killed is not None and await store.take_slot(rt, lapsing, 1, 30, "next") is None
    await rt.store.db.fetchall(
        "UPDATE llm_in_flight SET until = now() - interval '1 second' WHERE token = %s RETURNING slot",
        (killed,),
    )
    assert await store.take_slot(rt, lapsing, 1, 30, "next") is not None
