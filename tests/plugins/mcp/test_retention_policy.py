"""A webhook's own event retention over MCP: set_webhook_policy's ``events_days``."""

from __future__ import annotations

from typing import Any


async def test_set_webhook_policy_sets_and_resets_events_days(people: Any, connect: Any) -> None:
    ep = await people.vend(people.alice, "keeper")
    async with connect(people.url, ep["token"]) as a:
        hook = await a.call("create_webhook", source_type="generic", target_queue="inbox")
        wid = hook["webhook_id"]
        saved = await a.call("set_webhook_policy", webhook_id=wid, events_days=14)
        assert saved["events_days"] == 14
        # Another policy change keeps it; the rules are untouched.
        held = await a.call("set_webhook_policy", webhook_id=wid, on_fault="hold")
        assert (held["events_days"], held["on_fault"], held["rules"]) == (14, "hold", [])
        listed = await a.call("list_webhook_rules", webhook_id=wid)
        assert listed["events_days"] == 14
        # 0: the server's [retention] events_days again.
        reset = await a.call("set_webhook_policy", webhook_id=wid, events_days=0)
        assert "events_days" not in reset and reset["on_fault"] == "hold"
        for bad in (-3, 36501):
            err = await a.fails("set_webhook_policy", webhook_id=wid, events_days=bad)
            assert err.code == "invalid_rule" and "events_days" in err.text, err.text
