"""The stage in process, with a provider registered as a third party's plugin would: what
the prompt shows, how provider failures and revoked grants fall back, and faults kept."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from fakeai import FakeAI
from sbllm import QUEUES, Tenant, fresh_minute
from sbtest import free_port
from switchboard_llm import service
from switchboard_llm.providers import MAX_ANSWER_BYTES, OpenAIProvider
from switchboard_llm.stage import LLMStage

from switchboard.config import load_config
from switchboard.plugin import Decision, RoutingConfig, RoutingContext
from switchboard.routing.replay import sample_envelope
from switchboard.routing.route import config_of, grant_for, route
from switchboard.routing.trace import validate_trace
from switchboard.runtime import Runtime
from switchboard.service import identity
from switchboard.service import rules as rules_svc

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
GOOD = {"queue": "triage", "confidence": 0.9, "reason": "r"}


class Provider:
    """A provider as a plugin registers one: records each call, then behaves as told."""

    def __init__(
        self, name: str, answer: Any = None, *, fail: Exception | None = None, hang: float = 0.0
    ) -> None:
        self.name = name
        self.answer = answer
        self.fail = fail
        self.hang = hang
        self.calls: list[dict[str, Any]] = []

    async def complete(
        self, model: str, system: str, prompt: str, schema: dict[str, Any], timeout: float
    ) -> Any:
        self.calls.append(
            {
                "model": model,
                "system": system,
                "prompt": prompt,
                "schema": schema,
                "timeout": timeout,
            }
        )
        if self.hang:
            await asyncio.sleep(self.hang)  # ignores its timeout: the stage must not
        if self.fail is not None:
            raise self.fail
        return self.answer if not isinstance(self.answer, dict) else json.dumps(self.answer)


def _provider(rt: Runtime, t: Tenant, label: str, *args: Any, **kw: Any) -> Provider:
    provider = Provider(f"{label}-{t.n}", *args, **kw)
    rt.registries.llm_providers.add(provider)
    return provider


async def _route(
    t: Tenant,
    source: str = "generic",
    body: bytes = b'{"title": "x"}',
    headers: dict[str, str] | None = None,
) -> Decision:
    rt = t.rt
    row = await rt.store.resolve_webhook_by_id(t.hook["webhook_id"])
    assert row is not None
    envelope = sample_envelope(
        rt.registries.projections,
        sources=rt.registries.sources,
        source=source,
        trust_mode="token",
        webhook_id=row["id"],
        body=body,
        headers=headers,
    )
    decision = await route(rt.stages, row, config_of(row), envelope, grant_for(row), runtime=rt)
    validate_trace(decision.trace)
    return decision


def _prompt_doc(provider: Provider) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(provider.calls[-1]["prompt"].split("\n", 1)[1])
    return doc


async def test_the_prompt_shows_the_projected_title_and_actor(tenant: Tenant) -> None:
    t = tenant
    p = _provider(t.rt, t, "rec", GOOD)
    await t.triage("m", provider=p.name)
    cairn = (FIXTURES / "cairn_artifact_created.json").read_bytes()
    decision = await _route(t, "cairn", cairn)
    assert decision.queue == "triage" and decision.trace["stage"] == "llm"
    assert _prompt_doc(p)["event"] == {
        "source": "cairn",
        "kind": "artifact.created",
        "title": "handoff: audit the backup job",
        "size": len(cairn),
        "actor": "you@example.com",
    }
    github = (FIXTURES / "github_issues_opened.json").read_bytes()
    headers = json.loads((FIXTURES / "github_issues_opened.headers.json").read_text())
    await _route(t, "github", github, headers)
    event = _prompt_doc(p)["event"]
    payload = json.loads(github)
    assert event["kind"] == "issues" and event["title"] == payload["issue"]["title"]
    assert event["actor"] == payload["sender"]["login"]
    call = p.calls[-1]
    assert call["model"] == "m" and call["timeout"] == 1.5
    assert call["schema"]["properties"]["queue"]["enum"] == ["triage", "review"]


async def test_a_provider_that_ignores_its_timeout_is_cut_off(tenant: Tenant) -> None:
    t = tenant
    p = _provider(t.rt, t, "hang", GOOD, hang=30)
    await t.triage("m", provider=p.name, timeout_ms=300)
    started = asyncio.get_running_loop().time()
    decision = await _route(t)
    assert asyncio.get_running_loop().time() - started < 5
    assert decision.trace["cause"] == "llm_timeout" and decision.queue == "inbox"


async def test_a_provider_error_is_recorded_as_its_message(tenant: Tenant) -> None:
    t = tenant
    p = _provider(t.rt, t, "boom", fail=ConnectionResetError("peer reset the connection"))
    await t.triage("m", provider=p.name)
    decision = await _route(t)
    assert decision.trace["cause"] == "llm_error"
    assert decision.trace["llm"]["detail"] == "peer reset the connection"
    q = _provider(t.rt, t, "none", 42)  # not text at all
    await t.triage("m", provider=q.name)
    assert (await _route(t)).trace["llm"]["detail"] == "the provider returned no text"


async def test_a_call_that_never_reached_the_model_gives_its_prompt_back(
    tenant: Tenant,
) -> None:
    t = tenant
    url = f"http://127.0.0.1:{free_port()}/v1"  # a model server not started yet
    down = OpenAIProvider({"type": "openai", "name": f"down-{t.n}", "base_url": url})
    t.rt.registries.llm_providers.add(down)
    await t.triage("m", provider=down.name, token_budget_per_day=100000)
    fresh_minute()
    decision = await _route(t)
    assert decision.trace["cause"] == "llm_error" and decision.queue == "inbox"
    assert decision.trace["llm"]["detail"] == f'ConnectError from "{url}/chat/completions"'
    assert "usage" not in decision.trace["llm"]  # no tokens: nothing was sent
    view = await service.get_triage(t.rt, t.owner)
    assert view["usage"] == {"minute": 0, "day": 0} and view["tokens"] == {"minute": 0, "day": 0}
    # A call that failed after it was sent still counts: it may have cost.
    sent = _provider(t.rt, t, "reset", fail=ConnectionResetError("peer reset the connection"))
    await t.triage("m", provider=sent.name, token_budget_per_day=100000)
    assert (await _route(t)).trace["cause"] == "llm_error"
    assert (await service.get_triage(t.rt, t.owner))["usage"] == {"minute": 1, "day": 1}


async def test_a_provider_gone_from_the_config_falls_back(tenant: Tenant) -> None:
    t = tenant
    p = _provider(t.rt, t, "gone", GOOD)
    await t.triage("m", provider=p.name)
    # The operator removed it: a fresh runtime with the server's config no longer has it.
    rt = Runtime(load_config(t.srv.env["SWITCHBOARD_CONFIG"], env=t.srv.env))
    await rt.open_store(migrate=False)
    try:
        t2 = Tenant(t.srv, rt, t.w, t.hook, t.n)
        decision = await _route(t2)
    finally:
        await rt.shutdown()
    assert decision.trace["cause"] == "llm_error"
    assert decision.trace["llm"] == {
        "provider": p.name,
        "model": "m",
        "detail": f"provider {p.name!r} is not configured",
    }
    assert p.calls == []


async def test_a_queue_no_longer_granted_is_never_offered(tenant: Tenant) -> None:
    t = tenant
    pool = t.w.endpoint("alice", "pool", queues="lane-m")
    p = _provider(t.rt, t, "lanes", {"queue": "lane-m", "confidence": 0.9, "reason": "r"})
    await t.triage(
        "m", provider=p.name, queues=[*QUEUES, {"name": "lane-m", "description": "medium work"}]
    )
    assert (await _route(t)).queue == "lane-m"
    await identity.revoke_endpoint(t.rt, pool["endpoint_id"])
    # The model still answers lane-m, but it is no longer offered nor reachable.
    decision = await _route(t)
    assert [q["name"] for q in _prompt_doc(p)["queues"]] == ["triage", "review"]
    assert decision.trace["cause"] == "llm_unknown_queue" and decision.queue == "inbox"
    # With nothing left to offer, nothing is asked.
    pool_l = t.w.endpoint("alice", "pool-l", queues="lane-l")
    await t.triage("m", provider=p.name, queues=[{"name": "lane-l", "description": "big"}])
    await identity.revoke_endpoint(t.rt, pool_l["endpoint_id"])
    asked = len(p.calls)
    decision = await _route(t)
    assert decision.trace["cause"] == "no_match_default" and len(p.calls) == asked


async def test_faults_of_the_rules_are_kept_in_the_llm_trace(tenant: Tenant) -> None:
    t = tenant
    p = _provider(t.rt, t, "faults", GOOD)
    await t.triage("m", provider=p.name)
    await rules_svc.set_rules(
        t.rt,
        None,
        t.hook["webhook_id"],
        [{"id": "bad", "expr": 'error("boom")', "action": {"drop": True}}],
    )
    decision = await _route(t)
    assert decision.trace["stage"] == "llm"
    assert [f["cause"] for f in decision.trace["faults"]] == ["error"]
    p.fail = RuntimeError("down")
    fallback = await _route(t)
    assert (
        fallback.trace["cause"] == "llm_error" and fallback.trace["faults"][0]["rule_id"] == "bad"
    )


async def test_the_payload_is_cut_at_the_operators_limit(tenant: Tenant) -> None:
    t = tenant
    p = _provider(t.rt, t, "cut", GOOD)
    await t.triage("m", provider=p.name, include_payload=True)
    row = await t.rt.store.resolve_webhook_by_id(t.hook["webhook_id"])
    assert row is not None
    body = json.dumps({"text": "é" * 100}).encode()
    envelope = sample_envelope(
        t.rt.registries.projections,
        sources=t.rt.registries.sources,
        source="generic",
        trust_mode="token",
        webhook_id=row["id"],
        body=body,
    )
    for settings, shown in (
        ({"max_payload_bytes": 41}, '{"text":"' + "é" * 16),
        ({"allow_include_payload": False}, None),
        ({}, {"text": "é" * 100}),
    ):
        stage = LLMStage(settings)
        ctx = RoutingContext(row, envelope, grant_for(row), RoutingConfig(), runtime=t.rt)
        assert (await stage.route(ctx)).decision is not None
        doc = _prompt_doc(p)
        assert doc.get("payload") == shown
        assert doc.get("payload_truncated", False) is (settings == {"max_payload_bytes": 41})


def _openai(t: Tenant, label: str, base_url: str) -> OpenAIProvider:
    provider = OpenAIProvider({"type": "openai", "name": f"{label}-{t.n}", "base_url": base_url})
    t.rt.registries.llm_providers.add(provider)
    return provider


async def test_a_password_in_the_base_url_never_reaches_the_trace_or_the_log(
    tenant: Tenant, fake_ai: FakeAI, caplog: pytest.LogCaptureFixture
) -> None:
    t = tenant
    host = fake_ai.base_url.removeprefix("http://")
    failing = _openai(t, "cred", f"http://svc:pw-SECRET@{host}")
    model = fake_ai.on(t.model("cred-e500"), status=500)
    closed = _openai(t, "cred-down", f"http://svc:pw-SECRET@127.0.0.1:{free_port()}/v1")
    with caplog.at_level(logging.WARNING, logger="switchboard.llm"):
        await t.triage(model, provider=failing.name)
        decision = await _route(t)
        await t.triage(model, provider=closed.name)
        down = await _route(t)
    shown = f'"http://…@{host}/chat/completions"'
    assert decision.trace["cause"] == "llm_error" and decision.queue == "inbox"
    assert decision.trace["llm"]["detail"] == f"HTTP 500 from {shown}"
    assert down.trace["llm"]["detail"].startswith('ConnectError from "http://…@127.0.0.1:')
    # The log names the cause (an operator's first question), as the trace shows it.
    assert f"provider {failing.name!r} failed: 'HTTP 500 from {shown}'" in caplog.text
    assert f"provider {closed.name!r} failed: 'ConnectError from " in caplog.text
    for told in (json.dumps(decision.trace), json.dumps(down.trace), caplog.text):
        assert "SECRET" not in told and "svc:" not in told


async def test_an_answer_past_the_limit_is_a_provider_error(
    tenant: Tenant, fake_ai: FakeAI
) -> None:
    t = tenant
    provider = _openai(t, "huge", fake_ai.base_url)
    answer = json.dumps({"choices": [{"message": {"content": json.dumps(GOOD)}}]})
    padded = answer[:-1].encode() + b" " * (2 * MAX_ANSWER_BYTES) + b"}"  # valid, too big
    await t.triage(fake_ai.on(t.model("huge"), raw_body=padded), provider=provider.name)
    decision = await _route(t)
    assert decision.trace["cause"] == "llm_error" and decision.queue == "inbox"
    assert decision.trace["llm"]["detail"].startswith(
        f"the answer is larger than {MAX_ANSWER_BYTES} bytes"
    )


async def test_every_text_of_the_model_is_cut_in_the_stored_traces(
    tenant: Tenant, fake_ai: FakeAI
) -> None:
    # The trace is stored on the event and on each todo: the model must never size them.
    t = tenant
    model = fake_ai.on(
        t.model("long"), {"queue": "Q" * 100000, "confidence": 0.9, "reason": "R" * 5000}
    )
    await t.triage(model)
    t.route({"title": "x"}, "long-1")
    trace, todos = t.stored("long-1")
    assert trace["cause"] == "llm_unknown_queue" and [q for q, _ in todos] == ["inbox"]
    assert trace["llm"]["queue"] == "Q" * 1000 and trace["llm"]["reason"] == "R" * 1000
    for stored in (trace, *(tr for _, tr in todos)):
        assert len(json.dumps(stored)) < 3000
