"""MCP tools: an endpoint reads and sets its own LLM triage (never another endpoint's)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from switchboard.plugin import ToolContext

from . import service

TriageDoc = Annotated[
    dict[str, Any] | None,
    Field(
        description=(
            "{provider, model, queues: [{name, description}], min_confidence?, "
            "prompt_budget_per_minute?, prompt_budget_per_day?, include_payload?, timeout_ms?}; "
            "null turns triage off"
        )
    ),
]


async def get_llm_triage(ctx: ToolContext) -> dict[str, Any]:
    """This endpoint's LLM triage settings (null when off), the providers offered, the
    queues it may choose among, and the prompts spent this minute and today."""
    return await service.get_triage(ctx.runtime, ctx.owner)


async def set_llm_triage(ctx: ToolContext, llm_triage: TriageDoc) -> dict[str, Any]:
    """Turn LLM triage on (or change it) for this endpoint's webhooks, or off with null.

    When no rule matches, a model picks one of the described queues; a queue outside
    them, low confidence, a bad answer, an error, a timeout or a spent budget takes the
    default instead. Validated at save: provider, the operator's ceilings, the grant."""
    return await service.set_triage(ctx.runtime, ctx.owner, llm_triage)


TOOLS = (get_llm_triage, set_llm_triage)
