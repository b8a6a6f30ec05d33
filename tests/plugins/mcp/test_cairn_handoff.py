"""The Cairn handoff walkthrough (cairn-outbound-webhooks, worked example), end to end over MCP."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from switchboard.cli.send import build_request

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
ARTIFACT = json.loads((FIXTURES / "cairn_artifact_created.json").read_text())

HANDOFF_EXPR = (
    '.artifact.actor_id == "you@example.com" and ((.artifact.tags | arrays // [])'
    ' | any(. == "handoff") and any(. == "lane:m"))'
)


def post_artifact(url: str, secret: str, **data: Any) -> dict[str, Any]:
    doc = dict(ARTIFACT, data=dict(ARTIFACT["data"], **data))
    body, headers = build_request(
        "cairn", json.dumps(doc).encode(), secret.encode(), None, [], True
    )
    resp = httpx.post(url, content=body, headers=headers, timeout=30)
    assert resp.status_code == 202, resp.text
    return dict(resp.json())


async def test_cairn_handoff_walkthrough(people: Any, connect: Any) -> None:
    srv, w = people.srv, people.w
    mcp_url = srv.base_url + "/mcp"
    router = w.endpoint(
        people.alice, "router", sources="cairn", webhook_queues="inbox", webhook_max=2
    )
    pool = w.endpoint(people.alice, "pool-m", queues="handoff", webhook_max=0)
    pool_id = pool["endpoint_id"]
    rule = {
        "id": "handoff-lane-m",
        "name": "my handoffs for the medium pool",
        "expr": HANDOFF_EXPR,
        "action": {"queue": "handoff", "endpoints": [pool_id]},
    }

    async with connect(mcp_url, router["token"]) as me:
        # 1. Create the webhook: the secret and ingest URL are revealed once.
        hook = await me.call("create_webhook", source_type="cairn", target_queue="inbox")
        assert hook["trust_mode"] == "signed" and hook["signing_secret"].startswith("whsec_")
        listed = await me.call("list_webhooks")
        assert "signing_secret" not in json.dumps(listed)
        assert listed["usage"] == {"webhooks": 1, "remaining": 1}
        assert listed["ceiling"]["webhook_source_types"] == ["cairn"]
        wid = hook["webhook_id"]

        # 2. Route to the pool (idempotent).
        for _ in range(2):
            await me.call("add_webhook_route", webhook_id=wid, target_endpoint_id=pool_id)
        routes = await me.call("list_webhook_routes", webhook_id=wid)
        assert [r["target_endpoint_id"] for r in routes["routes"]] == [pool_id]

        # 3. A real delivery, before any rule: the default routes it.
        post_artifact(hook["ingest_url"], hook["signing_secret"])
        events = await me.call("list_webhook_events", webhook_id=wid)
        [event] = events["events"]
        assert event["kind"] == "artifact.created" and event["verified"] is True
        assert event["disposition"] == "routed" and event["trust_mode"] == "signed"
        assert events["next_cursor"] is None
        full = await me.call("get_webhook_event", webhook_id=wid, event_id=event["event_id"])
        assert full["payload"]["data"]["actor_id"] == "you@example.com"
        assert full["headers"]["x-cairn-signature"] == "«redacted»"

        # 4. Dry-run the rule against the stored event.
        dry = await me.call(
            "test_webhook_rules",
            webhook_id=wid,
            event_id=event["event_id"],
            rules=[rule],
            default_action={"drop": True},
        )
        assert dry["decision"] == {"drop": False, "queue": "handoff", "endpoints": [pool_id]}
        assert dry["trace"]["stage"] == "rule" and dry["trace"]["rule_id"] == "handoff-lane-m"
        assert dry["envelope"]["artifact"]["actor_id"] == "you@example.com"

        # 5. Save it, dropping everything else.
        saved = await me.call(
            "set_webhook_rules", webhook_id=wid, rules=[rule], default_action={"drop": True}
        )
        assert [r["id"] for r in saved["rules"]] == ["handoff-lane-m"]
        assert saved["default_action"] == {"drop": True}

        # 6. The next handoff (a new cairn event id) lands on the pool only.
        reply = post_artifact(hook["ingest_url"], hook["signing_secret"])
        assert [(t["endpoint_id"], t["queue"]) for t in reply["todos"]] == [(pool_id, "handoff")]

        # 7. A non-matching artifact is recorded and dropped.
        dropped = post_artifact(hook["ingest_url"], hook["signing_secret"], tags=["lane:m"])
        assert dropped["dropped"] is True and dropped["todos"] == []
        only = await me.call("list_webhook_events", webhook_id=wid, disposition="dropped")
        assert len(only["events"]) == 1
        assert only["events"][0]["routing_trace"]["action"] == {"drop": True}
        assert len((await me.call("list_webhook_events", webhook_id=wid))["events"]) == 3

    # 8. The pool, in its own session with its own token, claims the todo.
    async with connect(mcp_url, pool["token"]) as worker:
        got = await worker.call("claim_next")
        assert got["empty"] is False
        todo = got["todo"]
        assert todo["queue"] == "handoff" and todo["state"] == "claimed"
        assert todo["routing_trace"]["stage"] == "rule"
        assert todo["routing_trace"]["rule_id"] == "handoff-lane-m"
        assert todo["payload"]["artifact"]["id"] == ARTIFACT["data"]["id"]
        assert (await worker.call("claim_next")) == {"empty": True}
        done = await worker.call("complete", id=todo["todo_id"], result={"comment": "ok"})
        assert done["todo"]["state"] == "done"


async def test_cairn_handoff_pack_and_params_over_mcp(people: Any, connect: Any) -> None:
    """The same handoff from the shipped pack: installed over MCP, its allowlist in $params.

    ``params`` left out of set_webhook_rules or install_rule_pack keeps the stored params;
    ``params: null`` clears them; the pack without its params drops every handoff.
    """
    srv, rt = people.srv, people.rt
    router = await people.vend(
        people.alice, f"{people.alice}-router", sources="cairn", webhook_queues="inbox"
    )
    pools = {
        lane: await people.vend(
            people.alice, f"{people.alice}-pool-{lane}", queues=f"lane-{lane}", webhook_max=0
        )
        for lane in ("s", "m", "l", "vision")
    }
    trusted = {"trusted_actors": ["you@example.com"]}
    described = rt.registries.mcp_tools.get("set_webhook_rules").description
    assert "Omitting params keeps the stored params" in described

    async with connect(srv.base_url + "/mcp", router["token"]) as me:
        listed = await me.call("list_rule_packs")
        assert {"cairn-handoff", "lanes", "pool-review"} <= {p["name"] for p in listed["packs"]}
        hook = await me.call("create_webhook", source_type="cairn", target_queue="inbox")
        wid = hook["webhook_id"]
        for pool in pools.values():
            await me.call(
                "add_webhook_route", webhook_id=wid, target_endpoint_id=pool["endpoint_id"]
            )

        installed = await me.call("install_rule_pack", webhook_id=wid, pack="cairn-handoff")
        assert installed["pack"] == "cairn-handoff" and installed["params"] == {}
        # Without its allowlist the pack fails closed: the handoff is recorded and dropped.
        assert post_artifact(hook["ingest_url"], hook["signing_secret"])["dropped"] is True

        saved = await me.call(
            "install_rule_pack", webhook_id=wid, pack="cairn-handoff", params=trusted
        )
        assert saved["params"] == trusted
        rules = saved["rules"]
        # Re-saving the rules (or re-installing the pack) without params keeps them.
        kept = await me.call(
            "set_webhook_rules", webhook_id=wid, rules=rules, default_action={"drop": True}
        )
        assert kept["params"] == trusted
        again = await me.call("install_rule_pack", webhook_id=wid, pack="cairn-handoff")
        assert (
            again["params"] == trusted
            and (await me.call("list_webhook_rules", webhook_id=wid))["params"] == trusted
        )

        reply = post_artifact(hook["ingest_url"], hook["signing_secret"])
        assert [(t["endpoint_id"], t["queue"]) for t in reply["todos"]] == [
            (pools["m"]["endpoint_id"], "lane-m")
        ]

        missing = await me.fails("install_rule_pack", webhook_id=wid, pack="no-such-pack")
        assert missing.code == "pack_not_found"
        bad = await me.fails(
            "set_webhook_rules",
            webhook_id=wid,
            rules=rules,
            params={"trusted_actors": [{"nested": 1}]},
        )
        assert bad.code == "invalid_params"

        cleared = await me.call(
            "set_webhook_rules",
            webhook_id=wid,
            rules=rules,
            default_action={"drop": True},
            params=None,
        )
        assert cleared["params"] == {}
        assert post_artifact(hook["ingest_url"], hook["signing_secret"])["dropped"] is True

    async with connect(srv.base_url + "/mcp", pools["m"]["token"]) as worker:
        todo = (await worker.call("claim_next"))["todo"]
        order = todo["work_order"]
        assert order["lane"] == "lane-m" and order["subject"]["key"] == "cairn:a1b2c3d4e5"
        assert order["authorized_by"] == {
            "stage": "rule",
            "rule_id": "handoff-lane-m",
            "rule_name": "trusted handoffs tagged lane:m",
        }
        assert order["authority"] and order["verified"] is True
