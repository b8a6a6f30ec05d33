"""Turn a sandbox match into a delivery decision under the grant (pure, no I/O)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from switchboard.routing.model import (
    CAUSE_DEFAULT_NOT_GRANTED,
    CAUSE_NO_MATCH,
    CAUSE_RULE_NOT_GRANTED,
    STAGE_DEFAULT,
    STAGE_PENDING,
    STAGE_RULE,
    Decision,
    Fault,
    Grant,
    MatchResult,
    RoutingConfig,
)

_ACTION_KEYS = ("queue", "endpoints", "drop", "exclusive", "once", "work_order")


def _action_doc(action: dict[str, Any]) -> dict[str, Any]:
    return {k: action[k] for k in _ACTION_KEYS if k in action}


def resolve(action: dict[str, Any], grant: Grant) -> tuple[str, tuple[str, ...]] | None:
    """The (queue, endpoints) a queue action reaches under ``grant``, or None if unreachable."""
    queue = action.get("queue")
    if not isinstance(queue, str) or (queue != grant.target_queue and queue not in grant.queues):
        return None
    wanted = action.get("endpoints")
    chosen = None if wanted is None else set(wanted)
    targets = [t for t in grant.targets if chosen is None or t.endpoint_id in chosen]
    if action.get("exclusive") is True:
        # Exactly one target: the first, in the grant's deterministic order (owner, then
        # routes by granted_at and id), whose scope drains the queue. A target that does
        # not drain it could never claim the todo, so it never counts as "the one".
        first = next((t for t in targets if queue in t.scope_queues), None)
        return (queue, (first.endpoint_id,)) if first is not None else None
    endpoints = tuple(t.endpoint_id for t in targets)
    return (queue, endpoints) if endpoints else None


def _flags(action: dict[str, Any]) -> dict[str, Any]:
    return {"once": action.get("once") is True, "work_order": action.get("work_order") is True}


def _faults_doc(faults: Iterable[Fault]) -> list[dict[str, Any]]:
    return [f.to_json() for f in faults]


def default_decision(
    grant: Grant,
    default_action: dict[str, Any] | None = None,
    faults: Iterable[Fault] = (),
    *,
    cause: str | None = None,
    rule: tuple[int, dict[str, Any]] | None = None,
) -> Decision:
    """The default route: ``default_action`` when set and reachable, else the target queue.

    ``cause`` defaults to ``no_match_default``; ``rule`` is the (index, rule) that matched
    when the default is taken because that rule's action is no longer granted.
    """
    trace: dict[str, Any] = {"stage": STAGE_DEFAULT, "cause": cause or CAUSE_NO_MATCH}
    if rule is not None:
        trace.update(_rule_ref(*rule))
    fault_docs = _faults_doc(faults)
    drop = False
    queue: str | None = grant.target_queue
    endpoints: tuple[str, ...] = tuple(grant.endpoint_ids)
    action: dict[str, Any] = {"queue": grant.target_queue}
    flags = _flags({})
    if default_action is not None:
        if default_action.get("drop") is True:
            drop, queue, endpoints, action = True, None, (), {"drop": True}
        else:
            reached = resolve(default_action, grant)
            if reached is not None:
                queue, endpoints = reached
                action = _action_doc(default_action)
                flags = _flags(default_action)
            elif trace["cause"] == CAUSE_NO_MATCH:
                trace["cause"] = CAUSE_DEFAULT_NOT_GRANTED
    trace["action"] = action
    if fault_docs:
        trace["faults"] = fault_docs
    return Decision(drop=drop, queue=queue, endpoints=endpoints, trace=trace, **flags)


def pending_decision(stage: str, faults: Iterable[Fault] = ()) -> Decision:
    """A live delivery left to the deferred ``stage``: stored ``pending``, no todo yet.

    The faults of the stages before it are kept in the trace: the triage worker hands
    them to the stage when it runs.
    """
    trace: dict[str, Any] = {"stage": STAGE_PENDING, "pending": stage}
    fault_docs = _faults_doc(faults)
    if fault_docs:
        trace["faults"] = fault_docs
    return Decision(drop=False, queue=None, endpoints=(), trace=trace, pending=stage)


def _rule_ref(index: int, rule: dict[str, Any]) -> dict[str, Any]:
    ref: dict[str, Any] = {"rule_index": index}
    if rule.get("id"):
        ref["rule_id"] = rule["id"]
    if rule.get("name"):
        ref["rule_name"] = rule["name"]
    return ref


def decide(config: RoutingConfig, match: MatchResult, grant: Grant) -> Decision:
    """Apply the matched rule's action (or the default) to ``grant``; see the design doc."""
    rules = config.rules
    default_action = config.default_action
    index = match.rule_index
    if index is None or not 0 <= index < len(rules):
        return default_decision(grant, default_action, match.faults)
    rule = rules[index]
    action: dict[str, Any] = rule["action"]
    if action.get("drop") is True:
        trace: dict[str, Any] = {"stage": STAGE_RULE, **_rule_ref(index, rule)}
        trace["action"] = {"drop": True}
        if match.faults:
            trace["faults"] = _faults_doc(match.faults)
        return Decision(drop=True, queue=None, endpoints=(), trace=trace)
    reached = resolve(action, grant)
    if reached is None:
        # no fall-through: a revocation never silently promotes a later, broader rule
        return default_decision(
            grant, default_action, match.faults, cause=CAUSE_RULE_NOT_GRANTED, rule=(index, rule)
        )
    trace = {"stage": STAGE_RULE, **_rule_ref(index, rule), "action": _action_doc(action)}
    if match.faults:
        trace["faults"] = _faults_doc(match.faults)
    return Decision(
        drop=False, queue=reached[0], endpoints=reached[1], trace=trace, **_flags(action)
    )


def stage_decision(
    stage: str, action: dict[str, Any], grant: Grant, detail: Any = None
) -> Decision | None:
    """A stage's decision to take ``action`` (a drop, or a queue action) under ``grant``,
    its own ``detail`` under ``trace[stage]``; None when the grant does not reach the
    action's queue (the stage then passes, and the stages after it decide)."""
    trace: dict[str, Any] = {"stage": stage}
    if action.get("drop") is True:
        trace["action"] = {"drop": True}
        decision = Decision(drop=True, queue=None, endpoints=(), trace=trace)
    else:
        reached = resolve(action, grant)
        if reached is None:
            return None
        trace["action"] = _action_doc(action)
        decision = Decision(
            drop=False, queue=reached[0], endpoints=reached[1], trace=trace, **_flags(action)
        )
    if detail is not None:
        trace[stage] = detail
    return decision
