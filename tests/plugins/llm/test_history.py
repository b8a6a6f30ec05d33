"""The history verbs over deliveries the ``llm`` stage decided: its verdicts are read from
each event's stored trace (``replay = "stored"``), never asked again: a diff names the
events it decided, says they were not re-asked, and makes zero model calls."""

from __future__ import annotations

import psycopg
from fakeai import FakeAI
from sbllm import Tenant
from sbmcp import agent
from switchboard_llm.stage import LLMStage

from switchboard.plugin import REPLAY_STORED, replay_of
from switchboard.service import rules as rules_svc

GOOD = {"queue": "triage", "confidence": 0.92, "reason": "a crash report"}
ISSUE = {"title": "Crash on start", "kind": "bug"}
NOISE = [{"id": "noise", "expr": '.payload.kind == "noise"', "action": {"drop": True}}]


def _event_id(t: Tenant, delivery: str) -> str:
    with psycopg.connect(t.srv.env["SWITCHBOARD_DATABASE_URL"]) as conn:
        ((event_id,),) = conn.execute(
            "SELECT id FROM events WHERE external_id = %s",
            (f"{t.hook['webhook_id']}:{delivery}",),
        ).fetchall()
    return str(event_id)


def test_the_llm_stage_declares_it_is_replayed_from_the_trace() -> None:
    assert replay_of(LLMStage()) == REPLAY_STORED


async def test_a_diff_takes_the_llm_verdicts_from_the_traces_and_asks_no_model(
    tenant: Tenant, fake_ai: FakeAI
) -> None:
    t = tenant
    wid = t.hook["webhook_id"]
    await rules_svc.set_rules(t.rt, None, wid, NOISE)
    await t.triage(fake_ai.on(t.model("good"), GOOD))
    t.deliver(ISSUE, "h-good")  # the model decides: triage
    t.deliver({**ISSUE, "kind": "noise"}, "h-noise")  # a rule drops it: never asked
    await t.triage(fake_ai.on(t.model("broken"), status=500))
    t.deliver(ISSUE, "h-err")  # the model fails: llm's fallback, the default
    traces = {d: t.stored(d)[0] for d in ("h-good", "h-noise", "h-err")}
    assert traces["h-good"]["stage"] == "llm" and traces["h-err"]["cause"] == "llm_error"
    ids = {d: _event_id(t, d) for d in traces}
    asked = len(fake_ai._requests)

    async with agent(t.srv.base_url + "/mcp", t.w.endpoints["owner"]["token"]) as me:
        # the candidate drops the noise rule: that event would reach the model now
        diff = await me.call("diff_webhook_rules", webhook_id=wid, rules=[])
        explained = {
            d: await me.call("explain_webhook_event", webhook_id=wid, event_id=i)
            for d, i in ids.items()
        }
    assert len(fake_ai._requests) == asked  # zero model calls

    assert diff["evaluated"] == 3 and diff["changed"] == 1
    saved, cand = diff["totals"]["saved"], diff["totals"]["candidate"]
    assert saved["stages"] == {"llm": 2, "rules": 1} and saved["stored"] == {"llm": 2}
    assert cand["stages"] == {"llm": 2, "default": 1} and cand["stored"] == {"llm": 2}
    assert cand["unknown"] == {"llm": 1}  # never asked live, not asked now
    llm = diff["not_reasked"]["llm"]
    assert llm["decided"] == 2 and llm["decided_candidate"] == 2 and len(llm["event_ids"]) == 2
    assert "not asked again" in llm["detail"]
    [change] = diff["changes"]
    assert change["saved"]["decided_by"] == "rules" and change["saved"]["drop"] is True
    assert change["candidate"]["decided_by"] == "default"
    assert set(llm["event_ids"]) == {ids["h-good"], ids["h-err"]}
    assert change["event_id"] == ids["h-noise"]

    for delivery, doc in explained.items():
        assert doc["trace"] == traces[delivery], delivery
        said = [(s["stage"], s["said"], s["replay"]) for s in doc["stages"]]
        if delivery == "h-noise":
            assert said == [("rules", "decided", "rerun"), ("llm", "not_reached", "stored")]
        else:
            assert said == [("rules", "passed", "rerun"), ("llm", "decided", "stored")]
            assert doc["decision"]["decided_by"] == "llm"
            assert doc["decision"]["replay"] == "stored"


async def test_a_reroute_keeps_what_the_llm_decided(tenant: Tenant, fake_ai: FakeAI) -> None:
    from switchboard.service.history import diff_rules
    from switchboard.service.reroute import reroute_events

    t = tenant
    wid = t.hook["webhook_id"]
    await rules_svc.set_rules(t.rt, None, wid, NOISE)
    model = fake_ai.on(t.model("good"), GOOD)
    await t.triage(model)
    t.deliver(ISSUE, "r-good")  # the model decides: triage
    t.deliver({**ISSUE, "kind": "noise"}, "r-noise")  # a rule drops it: never asked
    ids = {d: _event_id(t, d) for d in ("r-good", "r-noise")}
    asked = len(fake_ai._requests)
    diff = await diff_rules(t.rt, None, wid, rules=[])
    await rules_svc.set_rules(t.rt, None, wid, [])

    plan = await reroute_events(t.rt, None, wid, plan=True)
    # the llm's stored verdict is replayed, as in the diff: only the noise event moves
    assert plan["totals"] == diff["totals"]["candidate"]
    assert [e["event_id"] for e in plan["events"]] == [ids["r-noise"]]
    done = await reroute_events(t.rt, None, wid, plan=False)
    assert done["todos_created"] == 1 and len(fake_ai._requests) == asked
    good_trace, good_todos = t.stored("r-good")
    assert [q for q, _ in good_todos] == ["triage"] and "reroutes" not in good_trace
