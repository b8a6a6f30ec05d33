"""A deleted webhook: its events stay, listable and readable by its owner (marked deleted),
nothing can change it any more, and its pending todos stay claimable (work already handed
out is not taken back)."""

from __future__ import annotations

from typing import Any

import httpx
from sbmcp import agent


async def test_a_deleted_webhooks_events_stay_its_owners(people: Any) -> None:
    owner = await people.vend(people.alice, "owner")
    stranger = await people.vend(people.bob, "stranger")
    async with agent(people.url, owner["token"]) as me:
        hook = await me.call("create_webhook", source_type="generic", target_queue="inbox")
        wid = hook["webhook_id"]
        reply = httpx.post(
            hook["ingest_url"],
            json={"n": 1},
            headers={"X-Delivery-Id": "before-delete"},
            timeout=30,
        )
        assert reply.status_code == 202, reply.text
        (event,) = (await me.call("list_webhook_events", webhook_id=wid))["events"]
        event_id = event["event_id"]
        await me.call("delete_webhook", webhook_id=wid)

        listed = await me.call("list_webhook_events", webhook_id=wid)
        assert [e["event_id"] for e in listed["events"]] == [event_id]
        assert listed["webhook_deleted_at"]
        one = await me.call("get_webhook_event", webhook_id=wid, event_id=event_id)
        assert one["payload"] == {"n": 1} and one["webhook_id"] == wid
        # the webhook itself is gone: not listed, and nothing changes it
        assert wid not in {w["webhook_id"] for w in (await me.call("list_webhooks"))["webhooks"]}
        for tool, args in (
            ("rotate_webhook", {}),
            ("set_webhook_rules", {"rules": []}),
            ("delete_webhook", {}),
        ):
            refused = (await me.fails(tool, webhook_id=wid, **args)).text
            assert refused.startswith("not_found:"), (tool, refused)
        # its pending todo stays claimable: kept, as documented
        claimed = (await me.call("claim_next", queue="inbox"))["todo"]
        assert claimed is not None and claimed["event_id"] == event_id
    async with agent(people.url, stranger["token"]) as them:
        refused = (await them.fails("list_webhook_events", webhook_id=wid)).text
        assert refused.startswith("not_found:")
