"""Every MCP tool refuses arguments it does not take, naming them, before anything runs."""

from __future__ import annotations

from typing import Any

UNKNOWN = "zz_not_an_argument"


async def test_every_tool_refuses_an_unknown_argument(people: Any, connect: Any) -> None:
    ep = await people.vend(people.alice, "walker")
    registered = {t.name for t in people.rt.registries.mcp_tools}
    async with connect(people.url, ep["token"]) as a:
        tools = (await a.session.list_tools()).tools
        assert {t.name for t in tools} == registered
        for tool in tools:
            assert tool.input_schema.get("additionalProperties") is False, tool.name
            result = await a.session.call_tool(tool.name, {UNKNOWN: 1})
            assert result.is_error, tool.name
            text = result.content[0].text  # type: ignore[union-attr]
            assert text.startswith("invalid_argument: "), (tool.name, text)
            assert repr(UNKNOWN) in text and tool.name in text, text


async def test_a_known_call_with_an_extra_key_changes_nothing(people: Any, connect: Any) -> None:
    ep = await people.vend(people.alice, "owner")
    async with connect(people.url, ep["token"]) as a:
        hook = await a.call("create_webhook", source_type="generic", target_queue="inbox")
        rules = [{"id": "r1", "expr": '.kind == "push"', "action": {"queue": "inbox"}}]
        err = await a.fails(
            "set_webhook_rules", webhook_id=hook["webhook_id"], rules=rules, on_fault="hold"
        )
        assert err.code == "invalid_argument"
        assert "'on_fault'" in err.text and "set_webhook_rules takes:" in err.text
        listed = await a.call("list_webhook_rules", webhook_id=hook["webhook_id"])
        assert listed["rules"] == []
        # Two unknown keys are both named, sorted.
        err = await a.fails("list_webhooks", b_extra=1, a_extra=2)
        assert "unknown arguments 'a_extra', 'b_extra'" in err.text
