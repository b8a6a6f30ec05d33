"""Least privilege by default: an endpoint that may own no webhooks (a pool that drains
queues and reads prompt-injectable todo text) is not given the verbs that change its
human's webhooks, unless vended with them; the router endpoint still has them."""

from __future__ import annotations

from typing import Any

from sbmcp import agent

from switchboard.service import identity

MANAGING = {
    "create_webhook",
    "rotate_webhook",
    "delete_webhook",
    "add_webhook_route",
    "remove_webhook_route",
    "set_webhook_rules",
    "add_webhook_rule",
    "update_webhook_rule",
    "move_webhook_rule",
    "remove_webhook_rule",
    "install_rule_pack",
    "rollback_webhook_rules",
    "reroute_webhook_events",
    "release_held_events",
    "release_once_claim",
    "set_webhook_policy",
}


async def test_a_drain_only_endpoint_cannot_take_over_its_humans_webhooks(people: Any) -> None:
    router = await people.vend(people.alice, "router")
    pool = await people.vend(
        people.alice, "pool", queues="handoff", webhook_queues="", webhook_max=0
    )
    zero = await people.vend(people.alice, "zero", webhook_max=0)  # queues, but no ceiling
    rows = {r["endpoint_id"]: r for r in await identity.list_endpoints(people.rt)}
    everything = set(identity.known_verbs(people.rt))
    assert MANAGING <= everything
    assert set(rows[router["endpoint_id"]]["verbs"]) == everything
    for drain in (pool, zero):
        verbs = set(rows[drain["endpoint_id"]]["verbs"])
        assert verbs == everything - MANAGING, verbs ^ (everything - MANAGING)
        assert {"claim_next", "complete", "list_webhooks", "test_webhook_rules"} <= verbs

    async with agent(people.url, router["token"]) as boss:
        hook = await boss.call("create_webhook", source_type="generic", target_queue="inbox")
    wid = hook["webhook_id"]
    async with agent(people.url, pool["token"]) as me:
        listed = await me.tool_names()
        assert not listed & MANAGING
        attempts = {
            "rotate_webhook": {"webhook_id": wid},
            "set_webhook_rules": {"webhook_id": wid, "rules": []},
            "add_webhook_route": {"webhook_id": wid, "target_endpoint_id": pool["endpoint_id"]},
            "delete_webhook": {"webhook_id": wid},
            "rollback_webhook_rules": {"webhook_id": wid, "version": 1},
            "release_once_claim": {"lane": "inbox", "subject": "x"},
        }
        for tool, arguments in attempts.items():
            refused = (await me.fails(tool, **arguments)).text
            assert refused.startswith("forbidden:") and "--verbs" in refused, (tool, refused)
        # it still reads and drains
        assert wid in {w["webhook_id"] for w in (await me.call("list_webhooks"))["webhooks"]}
    async with agent(people.url, router["token"]) as boss:
        # The router keeps every webhook-changing verb, the route included.
        routed = await boss.call(
            "add_webhook_route", webhook_id=wid, target_endpoint_id=pool["endpoint_id"]
        )
        assert pool["endpoint_id"] in str(routed), routed
        await boss.call("set_webhook_rules", webhook_id=wid, rules=[])
        await boss.call("rotate_webhook", webhook_id=wid)
        await boss.call("delete_webhook", webhook_id=wid)


async def test_verbs_given_explicitly_are_kept(people: Any) -> None:
    pool = await people.vend(
        people.alice,
        "pool-x",
        queues="handoff",
        webhook_queues="",
        webhook_max=0,
        verbs="claim_next,complete,rotate_webhook",
    )
    rows = {r["endpoint_id"]: r for r in await identity.list_endpoints(people.rt)}
    assert rows[pool["endpoint_id"]]["verbs"] == ["claim_next", "complete", "rotate_webhook"]


async def test_endpoint_show_lists_the_effective_verbs_and_the_withheld_ones(people: Any) -> None:
    pool = await people.vend(
        people.alice, "pool-s", queues="handoff", webhook_queues="", webhook_max=0
    )
    shown = people.w.cli.json("endpoint", "show", pool["endpoint_id"])
    assert set(shown["verbs_withheld"]) == MANAGING
    assert not set(shown["verbs"]) & MANAGING and "claim_next" in shown["verbs"]
    missing = people.w.cli.run("endpoint", "show", "not-an-id", check=False)
    assert missing.returncode == 1 and "not_found" in missing.stderr
