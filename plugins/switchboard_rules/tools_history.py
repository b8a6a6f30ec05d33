"""The rules plugin's MCP verbs over a webhook's stored deliveries: diff, re-route, release
held, explain and lint (switchboard.service.history and reroute)."""

from __future__ import annotations

from types import ModuleType
from typing import Annotated, Any, Literal

from pydantic import Field

from switchboard.plugin import ToolContext

from .tools import DefaultAction, Params, WebhookId


def _history() -> ModuleType:
    from switchboard.service import history

    return history


CandidateRules = Annotated[
    list[dict[str, Any]] | None,
    Field(
        description="Candidate rules (default: the saved ones, with the default_action and "
        "params given here)"
    ),
]
Last = Annotated[
    int | None,
    Field(description="The newest N stored events (default 1000)", ge=1),
]


Since = Annotated[
    str | None,
    Field(description="Instead of last: the events since a duration ago or a timestamp"),
]
Cursor = Annotated[
    str | None, Field(description="next_cursor of the previous call: go on from there")
]
Plan = Annotated[
    bool,
    Field(description="true (default): what would change, saving nothing; false: apply it"),
]
ApplyVersion = Annotated[
    int | None,
    Field(
        description="Apply only if the rules are still this version (the plan's version),"
        " else conflict and nothing applied",
        ge=0,
    ),
]


async def diff_webhook_rules(
    ctx: ToolContext,
    webhook_id: WebhookId,
    rules: CandidateRules = None,
    default_action: DefaultAction = None,
    params: Params = None,
    on_fault: Annotated[
        Literal["default", "hold"] | None,
        Field(description="Candidate fault policy (default: the saved one)"),
    ] = None,
    lanes: Annotated[
        dict[str, dict[str, int]] | None,
        Field(description="Candidate lanes (default: the saved ones; {}: none)"),
    ] = None,
    last: Last = None,
    since: Annotated[
        str | None,
        Field(
            description="Instead of last: the events since a duration ago (30m, 24h, 7d) "
            "or an RFC 3339 timestamp"
        ),
    ] = None,
    cursor: Annotated[
        str | None,
        Field(
            description="next_cursor of a call that max_events or the deadline cut: "
            "evaluate the rest of the window (pass the same candidate)"
        ),
    ] = None,
    changes_cursor: Annotated[
        str | None,
        Field(
            description="changes_cursor of the previous answer: the next page of changed "
            "events alone (pass the same candidate)"
        ),
    ] = None,
) -> dict[str, Any]:
    """Run a candidate routing config and the saved one over the webhook's whole window of
    stored events (newest first) and report what would change: totals per outcome for both
    sides and the number of events whose decision changes, over every event evaluated; the
    changed events (event_id, received_at, the saved and candidate decisions with the
    deciding stage and rule) 100 at a time (changes_cursor). Every enabled stage is
    replayed in order; a stage that is not re-asked (llm) has its stored verdicts taken, and
    not_reasked lists the events it decided. Answers candidate_hash (what set_webhook_rules
    diffed= checks) and the window covered. The candidate is what set_webhook_rules (or,
    with on_fault/lanes alone, set_webhook_policy) with the same arguments would save:
    params, on_fault and lanes not given are the saved ones. Saves nothing. Bounded by [plugins.rules]
    history_max_events and history_deadline_s (stopped says which cut it, next_cursor goes
    on); sends progress notifications when the request carries a progressToken."""
    result: dict[str, Any] = await _history().diff_rules(
        ctx.runtime,
        ctx.endpoint,
        webhook_id,
        rules=rules,
        default_action=default_action,
        params=params,
        on_fault=on_fault,
        lanes=lanes,
        last=last,
        since=since,
        cursor=cursor,
        changes_cursor=changes_cursor,
        progress=ctx.report_progress,
    )
    return result


async def reroute_webhook_events(
    ctx: ToolContext,
    webhook_id: WebhookId,
    plan: Plan = True,
    last: Last = None,
    since: Since = None,
    cursor: Cursor = None,
    changes_cursor: Annotated[
        str | None,
        Field(
            description="changes_cursor of a plan: its next page of changed events alone"
            " (pass the same filters)"
        ),
    ] = None,
    event_ids: Annotated[
        list[str] | None,
        Field(description="Only these stored events of the webhook (1 to 1000 ids)"),
    ] = None,
    disposition: Annotated[
        Literal["routed", "dropped", "repeat", "held"] | None,
        Field(description="Only the events stored with this disposition"),
    ] = None,
    expect_version: ApplyVersion = None,
) -> dict[str, Any]:
    """Re-route stored deliveries through the webhook's current rules, deciding exactly as
    diff_webhook_rules does (every stage replayed in order; the llm's stored verdicts taken):
    totals and candidate_hash are that diff's candidate side. Each event gets a todo on
    every target those rules name that has no todo from it yet (existing todos are never
    touched, a drop deletes nothing); a once rule takes its claim as live routing does (or
    meets the repeat) and a work order rides on the todo; the event's trace gains a
    reroutes entry and keeps its original decision. Pending deliveries are left to their
    stage (pending). Re-running under the same version creates nothing. The changed events
    come 100 at a time (changes_cursor). Bounded like diff_webhook_rules (next_cursor goes
    on); plan: true first."""
    from switchboard.service import reroute

    result: dict[str, Any] = await reroute.reroute_events(
        ctx.runtime,
        ctx.endpoint,
        webhook_id,
        last=last,
        since=since,
        cursor=cursor,
        changes_cursor=changes_cursor,
        event_ids=event_ids,
        disposition=disposition,
        plan=plan,
        progress=ctx.report_progress,
        expect_version=expect_version,
    )
    return result


async def release_held_events(
    ctx: ToolContext,
    webhook_id: WebhookId,
    plan: Plan = True,
    last: Last = None,
    since: Since = None,
    cursor: Cursor = None,
    changes_cursor: Annotated[
        str | None,
        Field(description="changes_cursor of a plan: its next page of changed events alone"),
    ] = None,
    event_ids: Annotated[
        list[str] | None, Field(description="Only these held events (1 to 1000 ids)")
    ] = None,
    expect_version: ApplyVersion = None,
) -> dict[str, Any]:
    """Release the webhook's held deliveries (on_fault: "hold") through its current rules:
    each goes where they say now, once (routed with its todos, dropped, or a repeat of a
    once claim another event holds); one the rules still fault on stays held (still_held).
    reroute_webhook_events over held events: last N is the newest N held ones."""
    from switchboard.service import reroute

    result: dict[str, Any] = await reroute.release_held(
        ctx.runtime,
        ctx.endpoint,
        webhook_id,
        last=last,
        since=since,
        cursor=cursor,
        changes_cursor=changes_cursor,
        event_ids=event_ids,
        plan=plan,
        progress=ctx.report_progress,
        expect_version=expect_version,
    )
    return result


async def explain_webhook_event(
    ctx: ToolContext,
    webhook_id: WebhookId,
    event_id: Annotated[str | None, Field(description="A stored event of this webhook")] = None,
    payload: Annotated[
        Any,
        Field(description="Instead: a sample raw body (a string as is, any other JSON serialized)"),
    ] = None,
    headers: Annotated[dict[str, str] | None, Field(description="The sample's headers")] = None,
    rules: CandidateRules = None,
    default_action: DefaultAction = None,
    params: Params = None,
) -> dict[str, Any]:
    """Why (not): what each routing stage said on one stored event or sample, in order
    (stages: decided, passed, faulted, not_reached, unknown), every rule's verdict in order:
    matched, false, null, error (with its message) or not_reached (an earlier rule matched,
    or an earlier stage decided: decided_by), and the decision. The verdicts come from the
    routing sandbox, as live. Saves nothing."""
    result: dict[str, Any] = await _history().explain_event(
        ctx.runtime,
        ctx.endpoint,
        webhook_id,
        event_id=event_id,
        payload=payload,
        headers=headers,
        rules=rules,
        default_action=default_action,
        params=params,
    )
    return result


async def lint_webhook_rules(
    ctx: ToolContext, webhook_id: WebhookId, last: Last = None
) -> dict[str, Any]:
    """Lint the saved rules against the webhook's newest stored events: rules that never
    matched, that only ever faulted, that an earlier rule shadowed on every event they
    matched, and params no rule reads. Sends progress notifications when asked."""
    result: dict[str, Any] = await _history().lint_rules(
        ctx.runtime,
        ctx.endpoint,
        webhook_id,
        last=last,
        progress=ctx.report_progress,
    )
    return result


TOOLS = (
    diff_webhook_rules,
    reroute_webhook_events,
    release_held_events,
    explain_webhook_event,
    lint_webhook_rules,
)
