"""Over MCP, with the real client: an endpoint manages its own triage, and
``test_webhook_rules`` runs the triage only when asked (``llm: "run"``)."""

from __future__ import annotations

import json
from typing import Any

import httpx
from fakeai import FakeAI
from sbllm import QUEUES, Tenant, fresh_minute
from sbmcp import agent
from sbtest import remember_secrets

from switchboard.routing.trace import validate_trace
from switchboard.service import identity


async def _vend(t: Tenant, name: str, **kw: Any) -> dict[str, Any]:
    ep = await identity.vend_endpoint(
        t.rt,
        owner=t.w.name("alice"),
        name=t.w.name(name),
        queues=["inbox"],
        webhook_queues=["inbox", "triage", "review"],
        source_types=["generic"],
        webhook_max=2,
        **kw,
    )
    remember_secrets(ep)
    return ep


async def test_an_endpoint_sets_reads_and_clears_its_own_triage(
    tenant: Tenant, fake_ai: FakeAI
) -> None:
    t = tenant
    a, b = await _vend(t, "agent-a"), await _vend(t, "agent-b")
    doc = {"provider": "static", "model": "static-triage", "queues": QUEUES, "min_confidence": 0.5}
    async with agent(t.srv.base_url + "/mcp", a["token"]) as ag:
        assert {"get_llm_triage", "set_llm_triage"} <= await ag.tool_names()
        first = await ag.call("get_llm_triage")
        assert first["endpoint_id"] == a["endpoint_id"] and first["llm_triage"] is None
        assert first["providers"] == ["fake", "static"] and first["enabled"] is True
        saved = await ag.call("set_llm_triage", llm_triage=doc)
        assert saved["llm_triage"]["model"] == "static-triage"
        assert saved["llm_triage"]["timeout_ms"] == 5000
        assert (await ag.call("get_llm_triage"))["llm_triage"] == saved["llm_triage"]

        bad = await ag.fails("set_llm_triage", llm_triage={**doc, "provider": "gpt"})
        assert bad.code == "invalid_argument" and "unknown provider 'gpt'" in bad.text
        far = await ag.fails(
            "set_llm_triage",
            llm_triage={**doc, "queues": [{"name": "payroll", "description": "pay"}]},
        )
        # The same code as the CLI's and the service's for the same cause
        assert far.code == "not_granted" and "'payroll' is not a queue" in far.text
        assert (await ag.call("get_llm_triage"))["llm_triage"] == saved["llm_triage"]

    async with agent(t.srv.base_url + "/mcp", b["token"]) as bg:
        # Another endpoint, even of the same human, sees and sets only its own.
        assert (await bg.call("get_llm_triage"))["llm_triage"] is None
        await bg.call("set_llm_triage", llm_triage={**doc, "model": "b-model"})
    async with agent(t.srv.base_url + "/mcp", a["token"]) as ag:
        assert (await ag.call("get_llm_triage"))["llm_triage"]["model"] == "static-triage"
        assert (await ag.call("set_llm_triage", llm_triage=None))["llm_triage"] is None
    async with agent(t.srv.base_url + "/mcp", b["token"]) as bg:
        assert (await bg.call("get_llm_triage"))["llm_triage"]["model"] == "b-model"


async def test_the_tools_follow_verb_scope(tenant: Tenant) -> None:
    t = tenant
    narrow = await _vend(t, "narrow", verbs=["get_llm_triage"])
    async with agent(t.srv.base_url + "/mcp", narrow["token"]) as ag:
        assert await ag.tool_names() == {"get_llm_triage"}
        err = await ag.fails("set_llm_triage", llm_triage=None)
        assert err.code == "forbidden"


async def test_a_dry_run_asks_the_model_only_when_told(tenant: Tenant, fake_ai: FakeAI) -> None:
    t = tenant
    ep = await _vend(t, "router")
    model = fake_ai.on(t.model("dry"), {"queue": "review", "confidence": 0.9, "reason": "a PR"})
    async with agent(t.srv.base_url + "/mcp", ep["token"]) as ag:
        hook = await ag.call("create_webhook", source_type="generic", target_queue="inbox")
        remember_secrets(hook)
        await ag.call(
            "set_llm_triage", llm_triage={"provider": "fake", "model": model, "queues": QUEUES}
        )
        sample = {"title": "please review"}
        fresh_minute()  # the minute's count below must not see the window turn under it
        skipped = await ag.call("test_webhook_rules", webhook_id=hook["webhook_id"], payload=sample)
        assert skipped["trace"] == {
            "stage": "default",
            "cause": "no_match_default",
            "action": {"queue": "inbox"},
        }
        assert fake_ai.requests(model) == []
        assert (await ag.call("get_llm_triage"))["usage"]["minute"] == 0

        ran = await ag.call(
            "test_webhook_rules", webhook_id=hook["webhook_id"], payload=sample, llm="run"
        )
        assert ran["decision"]["queue"] == "review"
        assert ran["trace"]["stage"] == "llm" and ran["trace"]["llm"]["reason"] == "a PR"
        validate_trace(ran["trace"])
        assert len(fake_ai.requests(model)) == 1
        assert (await ag.call("get_llm_triage"))["usage"]["minute"] == 1  # asked: it counts

        # A rule that matches decides before the triage, dry run or not.
        ruled = await ag.call(
            "test_webhook_rules",
            webhook_id=hook["webhook_id"],
            payload=sample,
            llm="run",
            rules=[{"expr": ".payload.title != null", "action": {"queue": "triage"}}],
        )
        assert ruled["trace"]["stage"] == "rule" and len(fake_ai.requests(model)) == 1

        # Over a stored delivery too (a dry run is never mistaken for a redelivery).
        resp = httpx.post(
            hook["ingest_url"],
            content=json.dumps(sample).encode(),
            headers={"X-Delivery-Id": "stored-1"},
            timeout=30,
        )
        assert resp.status_code == 202 and resp.json()["todos"][0]["queue"] == "review"
        events = await ag.call("list_webhook_events", webhook_id=hook["webhook_id"])
        event_id = events["events"][0]["event_id"]
        again = await ag.call(
            "test_webhook_rules", webhook_id=hook["webhook_id"], event_id=event_id, llm="run"
        )
        assert again["trace"]["stage"] == "llm" and len(fake_ai.requests(model)) == 3

        wrong = await ag.fails(
            "test_webhook_rules", webhook_id=hook["webhook_id"], payload=sample, llm="always"
        )
        assert "llm" in wrong.text
