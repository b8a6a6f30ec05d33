"""Every rule's verdict on one envelope ("why not"), and the match a live delivery would see (pure).

The verdict types (``RuleVerdict``, ``VerdictStage``) are part of the contract
(:mod:`switchboard.contract.routing`); this module holds what the host does with them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..contract.routing import (
    ERROR,
    FALSE,
    MATCHED,
    NOT_REACHED,
    NULL,
    VERDICTS,
    Fault,
    MatchResult,
    RoutingConfig,
    RuleVerdict,
    VerdictStage,
)

__all__ = [
    "ERROR",
    "FALSE",
    "MATCHED",
    "NOT_REACHED",
    "NULL",
    "VERDICTS",
    "RuleVerdict",
    "VerdictStage",
    "explained",
    "match_of",
    "verdict_stage",
]


def match_of(config: RoutingConfig, verdicts: Sequence[RuleVerdict]) -> MatchResult:
    """The :class:`MatchResult` live routing would have reported for these verdicts.

    First match wins; every faulting rule before it is a fault; a spent budget ends the
    evaluation with no match, exactly as the sandbox's own judgement does.
    """
    faults: list[Fault] = []
    for index, verdict in enumerate(verdicts):
        if verdict.verdict == MATCHED:
            return MatchResult(index, tuple(faults))
        if verdict.verdict == ERROR:
            rule_id = config.rules[index].get("id") if index < len(config.rules) else None
            faults.append(Fault(index, verdict.cause or "error", rule_id, verdict.detail))
            if verdict.cause == "budget_exhausted":
                return MatchResult(None, tuple(faults))
    return MatchResult(None, tuple(faults))


def explained(
    config: RoutingConfig, verdicts: Sequence[RuleVerdict], *, before: str | None = None
) -> list[dict[str, Any]]:
    """``[{index, id, verdict, error?}]``: rules after the first match are ``not_reached``
    (with ``would``: what they would have said), and a spent budget's rules are errors.

    ``before``: the stage that decided (or faulted) before the rules were reached: then
    every rule is ``not_reached``, with ``would`` and ``decided_by`` naming that stage.
    """
    out: list[dict[str, Any]] = []
    matched = before is not None
    for index, verdict in enumerate(verdicts):
        rule = config.rules[index] if index < len(config.rules) else {}
        doc: dict[str, Any] = {"index": index, "id": rule.get("id")}
        if rule.get("name"):
            doc["name"] = rule["name"]
        if matched:
            doc["verdict"] = NOT_REACHED
            doc["would"] = verdict.verdict
            if before is not None:
                doc["decided_by"] = before
        else:
            doc["verdict"] = verdict.verdict
            if verdict.verdict == ERROR:
                doc["cause"] = verdict.cause or "error"
                doc["error"] = verdict.detail or verdict.cause or "error"
            matched = verdict.verdict == MATCHED
        out.append(doc)
    return out


def verdict_stage(stages: Sequence[object]) -> VerdictStage | None:
    """The first enabled stage that reports verdicts (None: history dry runs are unavailable)."""
    for stage in stages:
        if isinstance(stage, VerdictStage):
            return stage
    return None
