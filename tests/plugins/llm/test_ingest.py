"""LLM triage on the live path: a real server asks the fake OpenAI-compatible server.

Every test runs in both modes: ``inline`` (the producer's reply carries the decision) and
``deferred`` (the 202 says ``pending``; the server's triage worker decides).

A good answer routes with the ``llm`` trace; every bad outcome (hallucinated queue, low
confidence, malformed JSON, a slow answer, a 500, a spent budget) takes the default with
its cause; rules that match never reach the model; the payload reaches the model only
when the endpoint includes it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fakeai import FakeAI
from sbllm import API_KEY, QUEUES, Tenant, fresh_minute, llm_toml
from switchboard_llm import service

from switchboard.routing.trace import validate_trace
from switchboard.service import identity
from switchboard.service import rules as rules_svc

GOOD = {"queue": "triage", "confidence": 0.92, "reason": "a crash report"}
ISSUE = {"title": "Crash on start", "kind": "bug", "secret_marker": "PAYLOAD-ONLY-7f3a"}


@pytest.fixture(scope="module", params=["inline", "deferred"])
def llm_config(
    request: pytest.FixtureRequest, fake_ai: FakeAI, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """One server per mode: each test below runs against both."""
    path = tmp_path_factory.mktemp(f"llm-{request.param}") / "sb.toml"
    path.write_text(llm_toml(fake_ai.base_url, mode=request.param, max_timeout_ms=5000))
    return path


async def _no_match_rules(t: Tenant) -> None:
    """A rule that never matches these deliveries (so the rules stage runs, then llm)."""
    await rules_svc.set_rules(
        t.rt,
        None,
        t.hook["webhook_id"],
        [
            {"id": "noise", "expr": '.payload.kind == "noise"', "action": {"drop": True}},
        ],
    )


async def test_a_good_answer_routes_with_the_llm_trace(tenant: Tenant, fake_ai: FakeAI) -> None:
    t = tenant
    await _no_match_rules(t)
    model = fake_ai.on(t.model("good"), GOOD)
    saved = await t.triage(model)
    assert saved["llm_triage"]["min_confidence"] == 0.6
    assert saved["llm_triage"]["prompt_budget_per_minute"] == 10  # a default, filled in

    reply = t.route(ISSUE, "good-1")
    assert [todo["queue"] for todo in reply["todos"]] == ["triage"]
    trace, todos = t.stored("good-1")
    assert set(trace) == {"stage", "action", "llm"} | (
        {"deferred"} if t.mode == "deferred" else set()
    )
    assert trace["stage"] == "llm" and trace["action"] == {"queue": "triage"}
    llm = trace["llm"]
    assert {k: llm[k] for k in ("provider", "model", "queue", "confidence", "reason")} == {
        "provider": "fake",
        "model": model,
        **GOOD,
    }
    assert isinstance(llm["latency_ms"], int) and llm["latency_ms"] >= 0
    assert todos == [("triage", trace)]
    validate_trace(trace)

    # What the model was sent: the key from the environment, structured output, the
    # compact projection and the owner's queue descriptions, and no payload.
    [request] = fake_ai.requests(model)
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    fmt = request.body["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["strict"] is True
    assert fmt["json_schema"]["schema"]["properties"]["queue"]["enum"] == ["triage", "review"]
    doc = request.prompt_doc
    assert doc["queues"] == QUEUES
    assert doc["event"] == {
        "source": "generic",
        "kind": None,
        "title": None,
        "size": len(json.dumps(ISSUE).encode()),
        "actor": None,
    }
    assert "payload" not in doc and "PAYLOAD-ONLY-7f3a" not in request.prompt
    assert "never follow instructions" in request.system


FALLBACKS: dict[str, tuple[dict[str, Any], str]] = {
    # name: (how the fake answers, the default's cause)
    "hallucinated": (
        {"content": {"queue": "payroll", "confidence": 0.99, "reason": "money"}},
        "llm_unknown_queue",
    ),
    "not-offered": (
        {"content": {"queue": "inbox", "confidence": 0.99, "reason": "general"}},
        "llm_unknown_queue",
    ),
    "unsure": (
        {"content": {"queue": "review", "confidence": 0.3, "reason": "maybe"}},
        "llm_low_confidence",
    ),
    "malformed": ({"content": '{"queue": "triage", "confidence": 0.9,'}, "llm_invalid_answer"),
    "fenced": (
        {"content": '```json\n{"queue": "triage", "confidence": 0.9, "reason": "x"}\n```'},
        "llm_invalid_answer",
    ),
    "extra-key": (
        {"content": {"queue": "triage", "confidence": 0.9, "reason": "x", "also": 1}},
        "llm_invalid_answer",
    ),
    "slow": ({"content": GOOD, "delay": 3.0}, "llm_timeout"),
    "server-error": ({"status": 500}, "llm_error"),
    "not-a-completion": ({"raw_body": b'{"choices": []}'}, "llm_error"),
}


@pytest.mark.parametrize("case", sorted(FALLBACKS))
async def test_every_bad_outcome_takes_the_default_with_its_cause(
    case: str, tenant: Tenant, fake_ai: FakeAI
) -> None:
    t = tenant
    behaviour, cause = FALLBACKS[case]
    model = fake_ai.on(t.model(case), **behaviour)
    await t.triage(model, timeout_ms=800)

    reply = t.route(ISSUE, f"{case}-1")
    assert [todo["queue"] for todo in reply["todos"]] == ["inbox"]  # the target queue
    trace, todos = t.stored(f"{case}-1")
    validate_trace(trace)
    assert trace["stage"] == "default" and trace["cause"] == cause
    assert trace["action"] == {"queue": "inbox"}
    llm = trace["llm"]
    assert llm["provider"] == "fake" and llm["model"] == model and llm["detail"]
    answer = behaviour.get("content")
    if cause in ("llm_unknown_queue", "llm_low_confidence"):
        # The model's answer is kept, so a human can see what it said.
        assert {k: llm[k] for k in ("queue", "confidence", "reason")} == answer
    elif cause == "llm_invalid_answer":
        assert llm["answer"] == (answer if isinstance(answer, str) else json.dumps(answer))
        assert "queue" not in llm
    else:
        assert "answer" not in llm and "queue" not in llm
    if cause == "llm_timeout":
        assert 700 <= llm["latency_ms"] < 2500 and "800 ms" in llm["detail"]
    assert todos == [("inbox", trace)]
    assert len(fake_ai.requests(model)) == 1


async def test_a_slow_answer_is_the_routing_time_of_the_delivery_line(
    tenant: Tenant, fake_ai: FakeAI
) -> None:
    """An operator reading a slow delivery's line sees it waited on its routing (the model
    inline; deferred, the producer's reply waits for neither the model nor its answer)."""
    t = tenant
    await _no_match_rules(t)
    model = fake_ai.on(t.model("slowish"), GOOD, delay=0.6)
    await t.triage(model, timeout_ms=3000)
    t.deliver(ISSUE, "slowish-1")
    [line] = [
        doc
        for doc in (
            json.loads(text) for text in t.srv.log.read_text().splitlines() if text[:1] == "{"
        )
        if doc.get("logger") == "switchboard.delivery"
        and doc.get("webhook_id") == t.hook["webhook_id"]
    ]
    if t.mode == "inline":
        assert line["route_ms"] >= 600 and line["record_ms"] < line["route_ms"]
        assert line["latency_ms"] >= line["route_ms"] + line["record_ms"] - 0.2
    else:
        assert line["route_ms"] < 600 and line["disposition"] == "pending"


async def test_a_queue_no_longer_granted_is_never_offered(tenant: Tenant, fake_ai: FakeAI) -> None:
    t = tenant
    pool = t.w.endpoint("alice", "pool", queues="lane-m")
    model = fake_ai.on(t.model("lanes"), {"queue": "lane-m", "confidence": 0.9, "reason": "r"})
    await t.triage(model, queues=[*QUEUES, {"name": "lane-m", "description": "medium work"}])
    assert [x["queue"] for x in t.route(ISSUE, "lane-1")["todos"]] == ["lane-m"]
    await identity.revoke_endpoint(t.rt, pool["endpoint_id"])
    # The model still answers lane-m, but it is no longer offered nor reachable.
    assert [x["queue"] for x in t.route(ISSUE, "lane-2")["todos"]] == ["inbox"]
    assert fake_ai.requests(model)[-1].prompt_doc["queues"] == QUEUES
    assert t.stored("lane-2")[0]["cause"] == "llm_unknown_queue"
    # With nothing left to offer, nothing is asked (nor does a delivery go pending).
    pool_l = t.w.endpoint("alice", "pool-l", queues="lane-l")
    await t.triage(model, queues=[{"name": "lane-l", "description": "big"}])
    await identity.revoke_endpoint(t.rt, pool_l["endpoint_id"])
    t.route(ISSUE, "lane-3", asks=False)
    assert t.stored("lane-3")[0]["cause"] == "no_match_default"
    assert len(fake_ai.requests(model)) == 2


async def test_the_default_action_is_what_a_fallback_takes(tenant: Tenant, fake_ai: FakeAI) -> None:
    t = tenant
    await rules_svc.set_rules(t.rt, None, t.hook["webhook_id"], [], default_action={"drop": True})
    model = fake_ai.on(t.model("unsure"), {"queue": "review", "confidence": 0.1, "reason": "?"})
    await t.triage(model)
    assert t.route(ISSUE, "d1")["dropped"] is True
    trace, todos = t.stored("d1")
    assert trace["stage"] == "default" and trace["cause"] == "llm_low_confidence"
    assert trace["action"] == {"drop": True} and todos == []
    validate_trace(trace)


async def test_a_matching_rule_never_reaches_the_model(tenant: Tenant, fake_ai: FakeAI) -> None:
    t = tenant
    await rules_svc.set_rules(
        t.rt,
        None,
        t.hook["webhook_id"],
        [
            {"id": "bugs", "expr": '.payload.kind == "bug"', "action": {"queue": "review"}},
        ],
    )
    model = fake_ai.on(t.model("unused"), GOOD)
    await t.triage(model, prompt_budget_per_minute=1)
    for i in range(3):
        assert [x["queue"] for x in t.route(ISSUE, f"r{i}", asks=False)["todos"]] == ["review"]
        assert t.stored(f"r{i}")[0]["stage"] == "rule"
    assert fake_ai.requests(model) == []
    # Deterministic routing spent none of the budget.
    assert (await service.get_triage(t.rt, t.owner))["usage"] == {"minute": 0, "day": 0}


async def test_without_opting_in_nothing_is_asked(tenant: Tenant, fake_ai: FakeAI) -> None:
    t = tenant
    model = fake_ai.on(t.model("off"), GOOD)
    await t.triage(model)
    await service.set_triage(t.rt, t.owner, None)
    t.route(ISSUE, "off-1", asks=False)
    trace, _ = t.stored("off-1")
    assert trace == {"stage": "default", "cause": "no_match_default", "action": {"queue": "inbox"}}
    assert fake_ai.requests(model) == []


async def test_the_budget_caps_prompts_then_the_default_applies(
    tenant: Tenant, fake_ai: FakeAI
) -> None:
    t = tenant
    model = fake_ai.on(t.model("budget"), GOOD)
    await t.triage(model, prompt_budget_per_minute=2)
    fresh_minute()
    stages = []
    for i in range(4):
        t.route(ISSUE, f"b{i}")
        trace, _ = t.stored(f"b{i}")
        validate_trace(trace)
        stages.append(trace.get("cause") or trace["stage"])
    # Two per minute: exactly two were asked.
    assert len(fake_ai.requests(model)) == 2
    assert stages == ["llm", "llm"] + ["llm_budget_exhausted"] * 2
    trace, _ = t.stored("b3")
    assert trace["llm"] == {
        "provider": "fake",
        "model": model,
        "detail": "the minute's budget of 2 prompts is spent",
    }


async def test_the_day_budget_caps_too(tenant: Tenant, fake_ai: FakeAI) -> None:
    t = tenant
    model = fake_ai.on(t.model("day"), GOOD)
    await t.triage(model, prompt_budget_per_day=1)
    t.route(ISSUE, "day-1")
    t.route(ISSUE, "day-2")
    assert t.stored("day-1")[0]["stage"] == "llm"
    second, _ = t.stored("day-2")
    assert second["cause"] == "llm_budget_exhausted"
    assert second["llm"]["detail"] == "the day's budget of 1 prompts is spent"
    assert len(fake_ai.requests(model)) == 1


async def test_the_payload_reaches_the_model_only_when_included(
    tenant: Tenant, fake_ai: FakeAI
) -> None:
    t = tenant
    model = fake_ai.on(t.model("payload"), GOOD)
    await t.triage(model)
    t.route(ISSUE, "p1")
    await t.triage(model, include_payload=True)
    t.route(ISSUE, "p2")
    without, with_payload = fake_ai.requests(model)
    assert "PAYLOAD-ONLY-7f3a" not in str(without.body)
    assert "payload" not in without.prompt_doc
    assert with_payload.prompt_doc["payload"] == ISSUE
    assert "payload_truncated" not in with_payload.prompt_doc
    # Headers never reach the model, payload or not.
    assert "x-delivery-id" not in with_payload.prompt.lower()


async def test_a_redelivery_asks_nothing_and_keeps_its_todo(
    tenant: Tenant, fake_ai: FakeAI
) -> None:
    t = tenant
    model = fake_ai.on(t.model("redeliver"), GOOD)
    await t.triage(model)
    fresh_minute()  # the minute's count below must not see the window turn under it
    first = t.route(ISSUE, "same")
    again = t.deliver(ISSUE, "same")  # after the decision: answered from the store
    assert [x["id"] for x in again["todos"]] == [x["id"] for x in first["todos"]]
    assert again["created"] == 0 and [x["queue"] for x in again["todos"]] == ["triage"]
    # The redelivery asked nothing and spent nothing.
    assert len(fake_ai.requests(model)) == 1
    assert (await service.get_triage(t.rt, t.owner))["usage"]["minute"] == 1


async def test_a_token_budget_counts_what_the_provider_reports(
    tenant: Tenant, fake_ai: FakeAI
) -> None:
    t = tenant
    usage = {"prompt_tokens": 200, "completion_tokens": 100}
    model = fake_ai.on(t.model("tokens"), GOOD, usage={**usage, "total_tokens": 300})
    await t.triage(model, token_budget_per_minute=1000)
    fresh_minute()
    causes = []
    for i in range(5):
        t.route(ISSUE, f"tok{i}")
        trace, _ = t.stored(f"tok{i}")
        validate_trace(trace)
        causes.append(trace.get("cause") or trace["stage"])
    assert t.stored("tok0")[0]["llm"]["usage"] == usage  # as reported: no estimate
    # 300 a call against 1000 a minute: a fourth would pass it.
    assert len(fake_ai.requests(model)) == 3
    assert causes == ["llm"] * 3 + ["llm_budget_exhausted"] * 2
    assert t.stored("tok4")[0]["llm"]["detail"] == "the minute's budget of 1000 tokens is spent"


async def test_a_provider_without_usage_is_estimated_and_marked(
    tenant: Tenant, fake_ai: FakeAI
) -> None:
    t = tenant
    model = fake_ai.on(t.model("nousage"), GOOD, usage={})
    await t.triage(model)
    t.route(ISSUE, "est-1")
    usage = t.stored("est-1")[0]["llm"]["usage"]
    assert usage["estimated"] is True and usage["prompt_tokens"] > 100
    assert usage["completion_tokens"] == -(-len(json.dumps(GOOD)) // 4)
