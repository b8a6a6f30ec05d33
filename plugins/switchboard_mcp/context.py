"""What an MCP tool function receives first: the runtime and the authenticated endpoint."""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from switchboard.runtime import Runtime


@dataclass(frozen=True)
class ToolContext:
    """The caller of one tool call.

    ``endpoint`` is the live endpoints row the bearer token authenticated (its ``id``,
    ``owner_human``, ``scope_queues``, ``verbs``, webhook ceiling...), re-checked on every
    HTTP request; ``owner`` is the identity a claimed todo records.
    """

    runtime: Runtime
    endpoint: dict[str, Any]
    session_id: str | None = None

    @property
    def owner(self) -> str:
        return str(self.endpoint["id"])


#: Set around each tools/list and tools/call by the server's caller middleware.
CALLER: ContextVar[dict[str, Any] | None] = ContextVar("switchboard_mcp_caller", default=None)
#: Set by the server just before a tool function runs.
TOOL_CONTEXT: ContextVar[ToolContext | None] = ContextVar("switchboard_mcp_tool", default=None)
