"""Every rule's verdict on one envelope ("why not"), and the match a live delivery would see (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from .model import Fault, MatchResult, RoutingConfig

#: A rule's verdict on one envelope (``explain_webhook_event``'s ``verdict``).
MATCHED = "matched"
FALSE = "false"
NULL = "null"
ERROR = "error"
NOT_REACHED = "not_reached"
VERDICTS = (MATCHED, FALSE, NULL, ERROR, NOT_REACHED)


@dataclass(frozen=True)
class RuleVerdict:
    """What one rule said about one envelope, as the sandbox reported it.

    ``verdict`` is :data:`MATCHED` (its first output was truthy), :data:`FALSE` (false, or
    no output), :data:`NULL` or :data:`ERROR`; an error carries ``cause``, one of the trace's
    fault causes (``error``, ``timeout``, ``compile_error``, ``budget_exhausted``,
    ``sandbox_failure``), and ``detail`` (the message).
    """

    verdict: str
    cause: str | None = None
    detail: str | None = None


@runtime_checkable
class VerdictStage(Protocol):
    """A stage that can report every rule's verdict, for dry runs over history (optional).

    ``verdicts`` evaluates each config's rules on each envelope where live routing does
    (the rules stage: its sandbox, under the same per-rule and per-event limits) and answers
    one tuple per envelope holding, per config, one :class:`RuleVerdict` per rule. Configs
    are evaluated together (one pass over the envelopes), so a diff costs one evaluation.
    ``history_max_events`` and ``history_deadline_s`` bound one history call.

    A stage may also offer ``prepare(envelope)``: the envelope in the stage's own form (the
    rules stage: its wire encoding), which ``verdicts`` then takes in its place. History
    calls prepare each envelope as soon as it is built, so the envelope itself is freed.
    ``preparer(configs)``, if offered too, returns the ``prepare`` to use for evaluating
    ``configs`` (the rules stage: only the envelope paths their rules can read).
    """

    name: str
    history_max_events: int
    history_deadline_s: float

    async def verdicts(
        self,
        configs: Sequence[RoutingConfig],
        envelopes: Sequence[dict[str, Any]],
        *,
        webhook: Mapping[str, Any],
    ) -> list[tuple[list[RuleVerdict], ...]]:
        """Per envelope, per config, every rule's verdict (in rule order)."""
        ...


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


def explained(config: RoutingConfig, verdicts: Sequence[RuleVerdict]) -> list[dict[str, Any]]:
    """``[{index, id, verdict, error?}]``: rules after the first match are ``not_reached``
    (with ``would``: what they would have said), and a spent budget's rules are errors."""
    out: list[dict[str, Any]] = []
    matched = False
    for index, verdict in enumerate(verdicts):
        rule = config.rules[index] if index < len(config.rules) else {}
        doc: dict[str, Any] = {"index": index, "id": rule.get("id")}
        if rule.get("name"):
            doc["name"] = rule["name"]
        if matched:
            doc["verdict"] = NOT_REACHED
            doc["would"] = verdict.verdict
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
