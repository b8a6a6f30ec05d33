"""Stock client configurations: the high-level client with a bearer header, and stdio."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client, ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from switchboard.service import identity

SWITCHBOARD = str(Path(sys.executable).with_name("switchboard"))


async def test_claude_code_style_http_config(people: Any) -> None:
    # {"type": "http", "url": ..., "headers": {"Authorization": "Bearer ..."}}
    ep = await people.vend(people.alice, "claude", queues="inbox")
    config = {
        "type": "http",
        "url": people.url,
        "headers": {"Authorization": f"Bearer {ep['token']}"},
    }
    async with httpx2.AsyncClient(headers=config["headers"]) as http:
        async with Client(streamable_http_client(config["url"], http_client=http)) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert {"create_webhook", "claim_next", "test_webhook_rules"} <= names
            result = await client.call_tool(
                "create_webhook", {"source_type": "generic", "target_queue": "inbox"}
            )
            assert not result.is_error and result.structured_content is not None
            assert result.structured_content["trust_mode"] == "token"
            bad = await client.call_tool("rotate_webhook", {"webhook_id": "nope"})
            assert bad.is_error
            assert bad.content[0].text == "not_found: webhook nope not found"  # type: ignore[union-attr]


@pytest.mark.slow
async def test_stdio_command(people: Any) -> None:
    ep = await people.vend(people.alice, "local", queues="inbox", verbs="list_webhooks,list_todos")
    params = StdioServerParameters(
        command=SWITCHBOARD, args=["mcp", "--token", ep["token"]], env=people.srv.env
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        names = {t.name for t in (await session.list_tools()).tools}
        assert names == {"list_webhooks", "list_todos"}
        listed = await session.call_tool("list_webhooks", {})
        assert not listed.is_error and listed.structured_content is not None
        assert listed.structured_content["ceiling"]["webhook_max"] == 5
        refused = await session.call_tool("claim_next", {})
        assert refused.is_error
        assert refused.content[0].text.startswith("forbidden: ")  # type: ignore[union-attr]
        # The same strict argument types as over HTTP: "yes" is no boolean.
        mistyped = await session.call_tool("list_todos", {"unreachable": "yes"})
        assert mistyped.is_error
        assert mistyped.content[0].text == (  # type: ignore[union-attr]
            "invalid_argument: unreachable: must be a boolean (got a string)"
        )
        # Revocation takes effect mid-session: every request re-checks the token.
        await identity.revoke_endpoint(people.rt, ep["endpoint_id"])
        after = await session.call_tool("list_webhooks", {})
        assert after.is_error
        assert after.content[0].text.startswith("forbidden: ")  # type: ignore[union-attr]
    # A bad token never speaks MCP.
    proc = people.w.cli.run("mcp", "--token", ep["token"], check=False)
    assert proc.returncode == 1 and "forbidden" in proc.stderr


@pytest.mark.slow
async def test_several_workers_serve_stateless_mcp(
    server_factory: Any, dsn: str, tmp_path: Path
) -> None:
    srv = server_factory(dsn, "--workers", "2")
    from switchboard.config import load_config
    from switchboard.runtime import Runtime

    rt = Runtime(load_config(env=srv.env))
    await rt.open_store(migrate=False)
    try:
        await identity.add_human(rt, "carol")
        ep = await identity.vend_endpoint(
            rt,
            owner="carol",
            name="w",
            queues=["inbox"],
            webhook_queues=["inbox"],
            source_types=["generic"],
            webhook_max=3,
        )
    finally:
        await rt.shutdown()
    headers = {"Authorization": f"Bearer {ep['token']}"}
    async with httpx2.AsyncClient(headers=headers) as http:
        async with Client(streamable_http_client(srv.base_url + "/mcp", http_client=http)) as c:
            for _ in range(3):  # requests land on either worker; no session to lose
                made = await c.call_tool(
                    "create_webhook", {"source_type": "generic", "target_queue": "inbox"}
                )
                assert not made.is_error
            listed = await c.call_tool("list_webhooks", {})
            assert listed.structured_content is not None
            assert listed.structured_content["usage"] == {"webhooks": 3, "remaining": 0}
