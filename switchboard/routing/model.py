"""Plain data shared by routing stages, decide and the pipeline (no I/O here)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

#: Trace stages and causes (``schemas/trace.schema.json`` is the authority).
STAGE_RULE = "rule"
STAGE_DEFAULT = "default"
STAGE_LLM = "llm"
CAUSE_NO_MATCH = "no_match_default"
CAUSE_RULE_NOT_GRANTED = "rule_not_granted"
CAUSE_DEFAULT_NOT_GRANTED = "default_not_granted"
FAULT_CAUSES = (
    "timeout",
    "error",
    "compile_error",
    "budget_exhausted",
    "sandbox_failure",
    "sandbox_busy",
)


@dataclass(frozen=True)
class Target:
    """A live, authorized delivery target of a webhook (the owner endpoint or a route)."""

    endpoint_id: str
    scope_queues: tuple[str, ...] = ()


@dataclass(frozen=True)
class Grant:
    """What a webhook's routing may reach, recomputed per delivery.

    ``targets`` are in delivery order: the owner endpoint first, then routes by
    ``granted_at`` then target id.
    """

    target_queue: str
    queues: tuple[str, ...]
    targets: tuple[Target, ...]

    @property
    def endpoint_ids(self) -> list[str]:
        return [t.endpoint_id for t in self.targets]

    def to_json(self) -> dict[str, Any]:
        return {
            "target_queue": self.target_queue,
            "queues": list(self.queues),
            "endpoints": self.endpoint_ids,
            "endpoint_queues": {t.endpoint_id: list(t.scope_queues) for t in self.targets},
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Grant:
        eq = doc.get("endpoint_queues") or {}
        return cls(
            target_queue=doc["target_queue"],
            queues=tuple(doc.get("queues") or [doc["target_queue"]]),
            targets=tuple(Target(e, tuple(eq.get(e, ()))) for e in doc.get("endpoints", [])),
        )


@dataclass(frozen=True)
class Fault:
    """A rule (or the sandbox, ``rule_index == -1``) that failed during evaluation."""

    rule_index: int
    cause: str
    rule_id: str | None = None
    detail: str | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"rule_index": self.rule_index, "cause": self.cause}
        if self.rule_id is not None:
            doc["rule_id"] = self.rule_id
        if self.detail:
            doc["detail"] = self.detail[:512]
        return doc


@dataclass(frozen=True)
class MatchResult:
    """What the sandbox returns: at most a rule index, never a destination."""

    rule_index: int | None
    faults: tuple[Fault, ...] = ()


@dataclass(frozen=True)
class Decision:
    """Where a delivery goes: nowhere (drop) or one queue on some targets."""

    drop: bool
    queue: str | None
    endpoints: tuple[str, ...]
    trace: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"drop": self.drop, "queue": self.queue, "endpoints": list(self.endpoints)}


@dataclass
class RoutingContext:
    """What a routing stage sees for one delivery."""

    webhook: dict[str, Any]
    envelope: dict[str, Any]
    grant: Grant
    faults: list[Fault] = field(default_factory=list)


@dataclass(frozen=True)
class StageResult:
    """A stage's answer: a decision (evaluation stops) or none, plus faults seen."""

    decision: Decision | None = None
    faults: tuple[Fault, ...] = ()


class RoutingStage(Protocol):
    """What ``switchboard_register_routing_stages`` registers."""

    name: str

    async def route(self, ctx: RoutingContext) -> StageResult:
        """Decide ``ctx`` or pass (decision None); never raise for tenant faults."""
        ...
