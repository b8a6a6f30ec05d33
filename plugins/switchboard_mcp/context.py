"""The caller of the current MCP request, carried in context variables."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from switchboard.registry import ToolContext

#: Set around each tools/list and tools/call by the server's caller middleware.
CALLER: ContextVar[dict[str, Any] | None] = ContextVar("switchboard_mcp_caller", default=None)
#: Set by the server just before a tool function runs.
TOOL_CONTEXT: ContextVar[ToolContext | None] = ContextVar("switchboard_mcp_tool", default=None)

__all__ = ["CALLER", "TOOL_CONTEXT", "ToolContext"]
