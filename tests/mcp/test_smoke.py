"""Smoke: the bridge serves MCP at /mcp of `switchboard serve`."""

from __future__ import annotations

from typing import Any


async def test_list_webhooks_over_http(people: Any, connect: Any) -> None:
    srv, w = people.srv, people.w
    ep = w.endpoint(people.alice, "owner")
    async with connect(srv.base_url + "/mcp", ep["token"]) as a:
        names = await a.tool_names()
        assert "claim_next" in names
        doc = await a.call("list_webhooks")
        assert doc["webhooks"] == []
