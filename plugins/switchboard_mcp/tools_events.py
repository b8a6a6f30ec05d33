"""MCP tools for a webhook's stored events, over switchboard.service.events."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from switchboard.service import events

from .context import ToolContext

WebhookId = Annotated[str, Field(description="The webhook's id")]


async def list_webhook_events(
    ctx: ToolContext,
    webhook_id: WebhookId,
    disposition: Annotated[
        Literal["routed", "dropped", "repeat"] | None,
        Field(
            description="Only routed, only dropped, or only repeats (a once action's subject"
            " and queue already claimed: no todo)"
        ),
    ] = None,
    limit: Annotated[int | None, Field(description="Page size, 1-100 (default 20)")] = None,
    cursor: Annotated[str | None, Field(description="next_cursor of the previous page")] = None,
) -> dict[str, Any]:
    """A webhook's deliveries, newest first: kind, verification, size, disposition and the
    routing trace of each, plus next_cursor for the next page."""
    return await events.list_events(
        ctx.runtime, ctx.endpoint, webhook_id, disposition=disposition, limit=limit, cursor=cursor
    )


async def get_webhook_event(
    ctx: ToolContext,
    webhook_id: WebhookId,
    event_id: Annotated[str, Field(description="The event's id")],
) -> dict[str, Any]:
    """One delivery with its sanitized headers and its payload (parsed JSON, else null)."""
    return await events.get_event(ctx.runtime, ctx.endpoint, webhook_id, event_id)


TOOLS = (list_webhook_events, get_webhook_event)
