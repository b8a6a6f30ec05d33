"""The rules plugin's MCP verbs: a webhook's routing rules, over switchboard.service.rules.

Registered by this plugin's own ``switchboard_register_mcp_tools`` (see ``__init__``); the
MCP plugin serves whatever the tool registry holds, so without this plugin there are none.
"""

from __future__ import annotations

from types import ModuleType
from typing import Annotated, Any, Literal

from pydantic import Field

from switchboard.plugin import ToolContext

WebhookId = Annotated[str, Field(description="The webhook's id")]
RuleId = Annotated[str, Field(description="The rule's id")]
Rules = Annotated[
    list[dict[str, Any]],
    Field(description="Ordered rules, first match wins: {id?, name?, expr (jq), action}"),
]
Action = Annotated[
    dict[str, Any],
    Field(description='{"queue": name}, {"queue": name, "endpoints": [ids]} or {"drop": true}'),
]
DefaultAction = Annotated[
    dict[str, Any] | None,
    Field(description="What happens when no rule matches (default: the target queue)"),
]
Params = Annotated[dict[str, Any] | None, Field(description="Bound as $params in expressions")]
Position = Annotated[int, Field(description="0-based index in the rule list")]


def _rules() -> ModuleType:
    # Imported per call so the surface loads even where the rules service is absent.
    from switchboard.service import rules

    return rules


async def list_webhook_rules(ctx: ToolContext, webhook_id: WebhookId) -> dict[str, Any]:
    """A webhook's rules, default action, params and the grant they may route within."""
    result: dict[str, Any] = await _rules().list_rules(ctx.runtime, ctx.endpoint, webhook_id)
    return result


SetParams = Annotated[
    dict[str, Any] | None,
    Field(
        description="Bound as $params in expressions. Omit it to keep the stored params;"
        " null clears them; an object replaces them"
    ),
]


ExpectVersion = Annotated[
    int | None,
    Field(
        description="Save only if the webhook is still at this version (list_webhook_rules "
        "answers it; 0: never saved), else conflict",
        ge=0,
    ),
]
Note = Annotated[str | None, Field(description="Why: kept with the version", max_length=500)]
Version = Annotated[int, Field(description="A version number (list_rule_versions)", ge=1)]


def _given(ctx: ToolContext, name: str) -> bool:
    # Unknown (a caller that does not say what it sent) reads as given: the value is used.
    return ctx.given is None or name in ctx.given


async def set_webhook_rules(
    ctx: ToolContext,
    webhook_id: WebhookId,
    rules: Rules,
    default_action: DefaultAction = None,
    params: SetParams = None,
    expect_version: ExpectVersion = None,
    diffed: Annotated[
        str | None,
        Field(
            description="The candidate_hash diff_webhook_rules answered for this candidate: "
            "the save is refused unless it is the hash of what is saved"
        ),
    ] = None,
    note: Note = None,
) -> dict[str, Any]:
    """Replace the whole rule list and default action (validated as a unit, compiled at save).
    Omitting params keeps the stored params ($params); params: null clears them. Every save
    is a new version (list_rule_versions); expect_version refuses with conflict when someone
    saved meanwhile; with [routing] require_diff the candidate must have been diffed first."""
    rules_service = _rules()
    result: dict[str, Any] = await rules_service.set_rules(
        ctx.runtime,
        ctx.endpoint,
        webhook_id,
        rules,
        default_action,
        params if _given(ctx, "params") else rules_service.KEEP,
        expect_version=expect_version,
        diffed=diffed,
        note=note,
    )
    return result


async def add_webhook_rule(
    ctx: ToolContext,
    webhook_id: WebhookId,
    expr: Annotated[str, Field(description="A jq filter over the envelope")],
    action: Action,
    id: Annotated[str | None, Field(description="A stable rule id")] = None,
    name: str | None = None,
    position: Annotated[int | None, Field(description="Insert here (default: last)")] = None,
) -> dict[str, Any]:
    """Insert one rule (concurrent edits never lose each other)."""
    result: dict[str, Any] = await _rules().add_rule(
        ctx.runtime,
        ctx.endpoint,
        webhook_id,
        expr=expr,
        action=action,
        id=id,
        name=name,
        position=position,
    )
    return result


async def update_webhook_rule(
    ctx: ToolContext,
    webhook_id: WebhookId,
    rule_id: RuleId,
    name: str | None = None,
    expr: str | None = None,
    action: Action | None = None,
) -> dict[str, Any]:
    """Change a rule's name, expression or action in place."""
    result: dict[str, Any] = await _rules().update_rule(
        ctx.runtime, ctx.endpoint, webhook_id, rule_id, name=name, expr=expr, action=action
    )
    return result


async def move_webhook_rule(
    ctx: ToolContext, webhook_id: WebhookId, rule_id: RuleId, position: Position
) -> dict[str, Any]:
    """Move a rule to another position."""
    result: dict[str, Any] = await _rules().move_rule(
        ctx.runtime, ctx.endpoint, webhook_id, rule_id, position
    )
    return result


async def remove_webhook_rule(
    ctx: ToolContext, webhook_id: WebhookId, rule_id: RuleId
) -> dict[str, Any]:
    """Remove a rule."""
    result: dict[str, Any] = await _rules().remove_rule(
        ctx.runtime, ctx.endpoint, webhook_id, rule_id
    )
    return result


async def test_webhook_rules(
    ctx: ToolContext,
    webhook_id: WebhookId,
    event_id: Annotated[str | None, Field(description="A stored event of this webhook")] = None,
    payload: Annotated[
        Any, Field(description="A sample raw body: a string as is, any other JSON serialized")
    ] = None,
    headers: Annotated[dict[str, str] | None, Field(description="Sample headers")] = None,
    rules: Annotated[
        list[dict[str, Any]] | None, Field(description="Candidate rules (default: saved)")
    ] = None,
    default_action: DefaultAction = None,
    params: Params = None,
    llm: Annotated[
        Literal["skip", "run"],
        Field(
            description='"run" also runs the LLM triage stage when no rule matches (a real '
            'model call that spends the triage budget); "skip" (default) does not'
        ),
    ] = "skip",
) -> dict[str, Any]:
    """Dry-run the saved (or candidate) rules against a stored event or a sample payload;
    returns the decision, the trace and the envelope the rules saw. Saves nothing; the LLM
    triage runs only with llm="run". "pending" names the deferred stage (llm) a live
    delivery would wait for: it would be answered 202 "pending" and decided after. A once
    action adds "once" (claimed, repeat with held_by, or no_subject), a work_order action
    the "work_order" its todos would carry."""
    result: dict[str, Any] = await _rules().test_rules(
        ctx.runtime,
        ctx.endpoint,
        webhook_id,
        event_id=event_id,
        payload=payload,
        headers=headers,
        rules=rules,
        default_action=default_action,
        params=params,
        llm=llm,
    )
    return result


def _versions() -> ModuleType:
    from switchboard.service import versions

    return versions


async def list_rule_versions(
    ctx: ToolContext,
    webhook_id: WebhookId,
    limit: Annotated[int | None, Field(description="Versions per page (default 50)", ge=1)] = None,
    cursor: Annotated[str | None, Field(description="next_cursor of the previous page")] = None,
) -> dict[str, Any]:
    """A webhook's routing versions, newest first: number, time, author (an endpoint's id or
    operator), content hash, rule count and note; get_rule_version has the config."""
    result: dict[str, Any] = await _versions().list_versions(
        ctx.runtime, ctx.endpoint, webhook_id, limit=limit, cursor=cursor
    )
    return result


async def get_rule_version(
    ctx: ToolContext, webhook_id: WebhookId, version: Version
) -> dict[str, Any]:
    """One routing version of a webhook, with its whole config."""
    result: dict[str, Any] = await _versions().get_version(
        ctx.runtime, ctx.endpoint, webhook_id, version
    )
    return result


async def rollback_webhook_rules(
    ctx: ToolContext,
    webhook_id: WebhookId,
    version: Version,
    expect_version: ExpectVersion = None,
    note: Note = None,
) -> dict[str, Any]:
    """Save an earlier version's config again, as a new version (validated against today's
    grant; expect_version as for set_webhook_rules; never held back by require_diff)."""
    result: dict[str, Any] = await _rules().rollback_rules(
        ctx.runtime,
        ctx.endpoint,
        webhook_id,
        version,
        expect_version=expect_version,
        note=note,
    )
    return result


def _packs() -> ModuleType:
    from switchboard.service import packs

    return packs


async def list_rule_packs(ctx: ToolContext) -> dict[str, Any]:
    """The rule packs installed plugins offer: name, description, plugin and config (rules,
    default_action; queue names, never endpoint ids). Install one with install_rule_pack."""
    result: dict[str, Any] = _packs().list_packs(ctx.runtime)
    return result


async def install_rule_pack(
    ctx: ToolContext,
    webhook_id: WebhookId,
    pack: Annotated[str, Field(description="The pack's name (see list_rule_packs)")],
    params: SetParams = None,
) -> dict[str, Any]:
    """Replace a webhook's rules and default action with a pack's (validated like
    set_webhook_rules: every exclusive lane queue needs a routed endpoint that drains it).
    Omitting params keeps the stored params ($params); params: null clears them."""
    result: dict[str, Any] = await _packs().install_pack(
        ctx.runtime,
        ctx.endpoint,
        webhook_id,
        pack,
        params if _given(ctx, "params") else _rules().KEEP,
    )
    return result


TOOLS = (
    list_webhook_rules,
    set_webhook_rules,
    add_webhook_rule,
    update_webhook_rule,
    move_webhook_rule,
    remove_webhook_rule,
    test_webhook_rules,
    list_rule_versions,
    get_rule_version,
    rollback_webhook_rules,
    list_rule_packs,
    install_rule_pack,
)
