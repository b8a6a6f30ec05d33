"""Over MCP, a refusal by scope or grant reads ``code: message`` naming the vend flag to change."""

from __future__ import annotations

from typing import Any


async def test_refusals_name_the_vend_flag(people: Any, connect: Any) -> None:
    narrow = await people.vend(
        people.alice, "narrow", verbs="list_webhooks,create_webhook", sources="generic"
    )
    async with connect(people.url, narrow["token"]) as a:
        verb = await a.fails("claim_next")
        assert verb.code == "forbidden" and "`switchboard endpoint vend --verbs" in verb.text
        source = await a.fails("create_webhook", source_type="cairn", target_queue="inbox")
        assert source.code == "forbidden_source_type"
        assert "--source-types cairn`" in source.text
