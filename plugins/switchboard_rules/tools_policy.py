"""The MCP verbs of a webhook's routing policy: its fault policy and lanes, and releasing
an at-most-once claim (``once`` actions, work-order lanes)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from switchboard.plugin import ToolContext


async def release_once_claim(
    ctx: ToolContext,
    lane: Annotated[str, Field(description="The lane (queue) the claim was routed to")],
    subject: Annotated[
        str, Field(description="The subject's key, as the work order's subject.key shows it")
    ],
    webhook_id: Annotated[
        str | None, Field(description="One webhook; omitted: every webhook of your human")
    ] = None,
) -> dict[str, Any]:
    """Release a once claim: the next delivery about this subject that a once rule routes to
    this lane claims it again (a re-run of a completed work order). The owner's, like a
    save; each release is recorded with who made it. not_found when no claim is held.
    A lane's once_ttl_s (routing config lanes) lets claims expire by themselves instead."""
    from switchboard.service import once

    result: dict[str, Any] = await once.release_once_claim(
        ctx.runtime, ctx.endpoint, lane, subject, webhook_id
    )
    return result


async def set_webhook_policy(
    ctx: ToolContext,
    webhook_id: Annotated[str, Field(description="The webhook's id")],
    on_fault: Annotated[
        Literal["default", "hold"] | None,
        Field(
            description='A delivery whose routing faulted: "default" takes the default action'
            ' (as always before), "hold" stores it held with no todo until'
            " release_held_events; omitted: kept"
        ),
    ] = None,
    lanes: Annotated[
        dict[str, dict[str, int]] | None,
        Field(
            description='Per lane (a granted queue): {"once_ttl_s": seconds}, how long a once'
            " claim there holds (1 s to a year); {} removes every lane's; omitted: kept"
        ),
    ] = None,
    events_days: Annotated[
        int | None,
        Field(
            description="How many days this webhook's events are kept (1 to 36500) before the"
            " retention job deletes them (todos and once claims stay); 0: the server's"
            " [retention] events_days; omitted: kept"
        ),
    ] = None,
    expect_version: Annotated[
        int | None, Field(description="Refuse (conflict) unless the current version is this")
    ] = None,
    diffed: Annotated[
        str | None,
        Field(
            description="The candidate_hash diff_webhook_rules answered for this change"
            " (on_fault/lanes, no rules): refused (diff_mismatch) if it is not this save's"
        ),
    ] = None,
    note: Annotated[str | None, Field(description="Why, kept with the new version")] = None,
) -> dict[str, Any]:
    """Set the webhook's fault policy, lanes and/or event retention, keeping its rules: a new
    version like any save (list_rule_versions shows it, rollback_webhook_rules undoes it).
    Gated like any save under [routing] require_diff when on_fault or lanes change:
    diff_webhook_rules with the same on_fault/lanes first (events_days alone is not gated)."""
    from switchboard.service import rules

    result: dict[str, Any] = await rules.set_policy(
        ctx.runtime,
        ctx.endpoint,
        webhook_id,
        on_fault=rules.KEEP if on_fault is None else on_fault,
        lanes=rules.KEEP if lanes is None else (lanes or None),
        events_days=rules.KEEP if events_days is None else (events_days or None),
        expect_version=expect_version,
        diffed=diffed,
        note=note,
    )
    return result


TOOLS = (set_webhook_policy, release_once_claim)
