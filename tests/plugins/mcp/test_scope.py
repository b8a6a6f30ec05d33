"""Authentication, verb scope, and one human never seeing another's webhooks or events."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx

from switchboard.service import identity

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}
CALL = {
    "jsonrpc": "2.0",
    "id": 2,
    "method": "tools/call",
    "params": {"name": "list_webhooks", "arguments": {}},
}
ACCEPT = "application/json, text/event-stream"


def _post(url: str, doc: dict[str, Any], token: str | None, **headers: str) -> httpx.Response:
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.post(
        url,
        json=doc,
        timeout=30,
        headers={"Accept": ACCEPT, "MCP-Protocol-Version": "2025-06-18", **headers},
    )


async def test_bad_tokens_are_refused_before_any_tool_runs(people: Any) -> None:
    srv = people.srv
    url = srv.base_url + "/mcp"
    ep = await people.vend(people.alice, "owner")
    assert _post(url, CALL, ep["token"]).status_code == 200
    await identity.revoke_endpoint(people.rt, ep["endpoint_id"])
    expired = await people.vend(people.alice, "old", expires_in=1)
    for token in (ep["token"], "sbe_" + "x" * 40, None):
        for doc in (INIT, CALL):
            resp = _post(url, doc, token)
            assert resp.status_code == 401, resp.text
            assert resp.headers["www-authenticate"].startswith("Bearer")
            assert resp.json()["error"] == "invalid_token"
    await asyncio.sleep(1.1)
    assert _post(url, CALL, expired["token"]).status_code == 401


async def test_dns_rebinding_is_refused(people: Any) -> None:
    srv = people.srv
    ep = await people.vend(people.alice, "owner")
    url = srv.base_url + "/mcp"
    assert _post(url, INIT, ep["token"], Host="evil.example:80").status_code == 421
    assert _post(url, INIT, ep["token"], Origin="http://evil.example").status_code == 403
    assert _post(url, INIT, ep["token"], Host=f"localhost:{srv.port}").status_code == 200


async def test_tools_list_follows_verb_scope(people: Any, connect: Any) -> None:
    srv = people.srv
    narrow = await people.vend(people.alice, "narrow", verbs="list_webhooks,claim_next")
    full = await people.vend(people.alice, "full")
    async with connect(srv.base_url + "/mcp", narrow["token"]) as a:
        assert await a.tool_names() == {"list_webhooks", "claim_next"}
        assert (await a.call("claim_next")) == {"empty": True}
        err = await a.fails("create_webhook", source_type="generic", target_queue="inbox")
        assert err.code == "forbidden" and "create_webhook" in err.text
    async with connect(srv.base_url + "/mcp", full["token"]) as b:
        tools = (await b.session.list_tools()).tools
        assert len(tools) >= 22
        for tool in tools:  # every tool has an input schema and structured output
            assert tool.input_schema["type"] == "object", tool.name
            assert tool.output_schema is not None and tool.output_schema["type"] == "object"
            assert tool.description, tool.name
        err = await b.fails("no_such_tool")
        assert err.code == "not_found"


async def test_another_humans_webhook_and_event_are_not_found(people: Any, connect: Any) -> None:
    srv = people.srv
    url = srv.base_url + "/mcp"
    alice = await people.vend(people.alice, "alice-owner", queues="inbox")
    bob = await people.vend(people.bob, "bob-owner", queues="inbox")
    async with connect(url, alice["token"]) as a, connect(url, bob["token"]) as b:
        hook = await a.call("create_webhook", source_type="generic", target_queue="inbox")
        other = await a.call("create_webhook", source_type="generic", target_queue="inbox")
        wid = hook["webhook_id"]
        resp = httpx.post(
            hook["ingest_url"], content=b'{"n": 1}', timeout=30, headers={"X-Delivery-Id": "one"}
        )
        assert resp.status_code == 202
        [event] = (await a.call("list_webhook_events", webhook_id=wid))["events"]
        eid = event["event_id"]
        missing = str(uuid.uuid4())
        for tool, args in (
            ("list_webhook_events", {"webhook_id": wid}),
            ("get_webhook_event", {"webhook_id": wid, "event_id": eid}),
            ("rotate_webhook", {"webhook_id": wid}),
            ("delete_webhook", {"webhook_id": wid}),
            ("list_webhook_routes", {"webhook_id": wid}),
            ("list_webhook_rules", {"webhook_id": wid}),
            ("test_webhook_rules", {"webhook_id": wid, "event_id": eid}),
        ):
            theirs = await b.fails(tool, **args)
            nothing = await b.fails(tool, **dict(args, webhook_id=missing))
            assert theirs.code == nothing.code == "not_found", tool
            assert theirs.text.replace(wid, missing) == nothing.text
        # Bob sees none of Alice's webhooks, and none of her events through his own.
        assert (await b.call("list_webhooks"))["webhooks"] == []
        # Her event read through her other webhook is not found either.
        err = await a.fails("get_webhook_event", webhook_id=other["webhook_id"], event_id=eid)
        assert err.code == "not_found"
        assert (await a.call("get_webhook_event", webhook_id=wid, event_id=eid))["payload"] == {
            "n": 1
        }


async def test_routes_and_rules_refuse_strangers(people: Any, connect: Any) -> None:
    srv = people.srv
    url = srv.base_url + "/mcp"
    owner = await people.vend(people.alice, "owner", queues="inbox")
    unrouted = await people.vend(people.alice, "unrouted", queues="inbox")
    stranger = await people.vend(people.bob, "stranger", queues="inbox")
    async with connect(url, owner["token"]) as a:
        wid = (await a.call("create_webhook", source_type="generic", target_queue="inbox"))[
            "webhook_id"
        ]
        e1 = await a.fails(
            "add_webhook_route", webhook_id=wid, target_endpoint_id=stranger["endpoint_id"]
        )
        e2 = await a.fails(
            "add_webhook_route", webhook_id=wid, target_endpoint_id=str(uuid.uuid4())
        )
        assert e1.code == "forbidden" and e1.text == e2.text
        # A rule may only narrow to endpoints that are already routes.
        err = await a.fails(
            "add_webhook_rule",
            webhook_id=wid,
            expr="true",
            action={"queue": "inbox", "endpoints": [unrouted["endpoint_id"]]},
        )
        assert err.code == "not_granted", err.text  # as `rules check` says it
        bad = await a.fails("add_webhook_rule", webhook_id=wid, expr=".[", action={"drop": True})
        assert bad.code == "invalid_expression", bad.text
        typo = await a.fails("move_webhook_rule", webhook_id=wid, rule_id="nope", position=0)
        assert typo.code == "rule_not_found"
        wrong = await a.fails("add_webhook_rule", webhook_id=wid, expr=5, action={"drop": True})
        assert wrong.code == "invalid_argument" and "expr" in wrong.text


async def test_concurrent_rule_adds_both_land(people: Any, connect: Any) -> None:
    srv = people.srv
    url = srv.base_url + "/mcp"
    owner = await people.vend(people.alice, "owner", queues="inbox")
    async with connect(url, owner["token"]) as a, connect(url, owner["token"]) as b:
        wid = (await a.call("create_webhook", source_type="generic", target_queue="inbox"))[
            "webhook_id"
        ]
        await asyncio.gather(
            a.call(
                "add_webhook_rule",
                webhook_id=wid,
                id="one",
                expr='.kind == "a"',
                action={"drop": True},
            ),
            b.call(
                "add_webhook_rule",
                webhook_id=wid,
                id="two",
                expr='.kind == "b"',
                action={"queue": "inbox"},
            ),
        )
        rules = (await a.call("list_webhook_rules", webhook_id=wid))["rules"]
        assert sorted(r["id"] for r in rules) == ["one", "two"]
        await a.call("move_webhook_rule", webhook_id=wid, rule_id="two", position=0)
        await a.call("update_webhook_rule", webhook_id=wid, rule_id="one", name="renamed")
        after = await a.call("remove_webhook_rule", webhook_id=wid, rule_id="two")
        assert [(r["id"], r.get("name")) for r in after["rules"]] == [("one", "renamed")]
        sample = await a.call("test_webhook_rules", webhook_id=wid, payload={"x": 1})
        assert sample["decision"]["queue"] == "inbox"
        raw = await a.call(
            "test_webhook_rules", webhook_id=wid, payload='{"x": 1}', headers={"X-Test": "1"}
        )
        assert raw["envelope"]["payload"] == {"x": 1}


async def test_event_paging_limits(people: Any, connect: Any) -> None:
    srv = people.srv
    owner = await people.vend(people.alice, "owner", queues="inbox")
    async with connect(srv.base_url + "/mcp", owner["token"]) as a:
        wid = (await a.call("create_webhook", source_type="generic", target_queue="inbox"))[
            "webhook_id"
        ]
        for limit in (0, 101):
            err = await a.fails("list_webhook_events", webhook_id=wid, limit=limit)
            assert err.code == "invalid_argument"
        err = await a.fails("list_webhook_events", webhook_id=wid, cursor="garbage")
        assert err.code == "invalid_argument"
