"""An MCP agent as a stock client is one: streamable HTTP, a bearer token, the real SDK."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from sbtest import remember_secrets

__all__ = ["Agent", "ToolFailed", "agent"]


class ToolFailed(AssertionError):
    """A tool answered with an isError result; ``text`` is ``code: message``."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text
        self.code = text.split(":", 1)[0]


class Agent:
    """One MCP session over streamable HTTP, carrying one endpoint's bearer token."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session

    async def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        result = await self.session.call_tool(tool, arguments)
        if result.is_error:
            raise ToolFailed(result.content[0].text)  # type: ignore[union-attr]
        assert result.structured_content is not None, f"{tool}: no structured content"
        # The text block mirrors the structured content.
        assert json.loads(result.content[0].text) == result.structured_content  # type: ignore[union-attr]
        remember_secrets(result.structured_content)
        return result.structured_content

    async def fails(self, tool: str, **arguments: Any) -> ToolFailed:
        try:
            await self.call(tool, **arguments)
        except ToolFailed as exc:
            return exc
        raise AssertionError(f"{tool} succeeded")

    async def tool_names(self) -> set[str]:
        return {t.name for t in (await self.session.list_tools()).tools}


@asynccontextmanager
async def agent(url: str, token: str, *, timeout: float = 30) -> AsyncIterator[Agent]:
    """Exactly what a stock client configured with a URL and an Authorization header does."""
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield Agent(session)
