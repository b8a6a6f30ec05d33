"""Plain data and protocols every routing stage shares: grants, faults, decisions, verdicts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

#: Trace stages and causes (``schemas/trace.schema.json`` is the authority).
STAGE_RULE = "rule"
STAGE_DEFAULT = "default"
STAGE_LLM = "llm"
#: The trace of an event a deferred stage has yet to decide (``trace["pending"]``: which).
STAGE_PENDING = "pending"
CAUSE_NO_MATCH = "no_match_default"
CAUSE_RULE_NOT_GRANTED = "rule_not_granted"
CAUSE_DEFAULT_NOT_GRANTED = "default_not_granted"
#: Why an LLM triage stage took the default instead of the model's answer.
CAUSE_LLM_UNKNOWN_QUEUE = "llm_unknown_queue"
CAUSE_LLM_LOW_CONFIDENCE = "llm_low_confidence"
CAUSE_LLM_INVALID_ANSWER = "llm_invalid_answer"
CAUSE_LLM_ERROR = "llm_error"
CAUSE_LLM_TIMEOUT = "llm_timeout"
CAUSE_LLM_BUDGET_EXHAUSTED = "llm_budget_exhausted"
LLM_CAUSES = (
    CAUSE_LLM_UNKNOWN_QUEUE,
    CAUSE_LLM_LOW_CONFIDENCE,
    CAUSE_LLM_INVALID_ANSWER,
    CAUSE_LLM_ERROR,
    CAUSE_LLM_TIMEOUT,
    CAUSE_LLM_BUDGET_EXHAUSTED,
)
#: What became of a delivery, stored with its event (never re-derived from the trace).
#: ``repeat``: a ``once`` action whose subject and queue another event already claimed
#: (no todo). ``pending``: a deferred stage decides it later (no todo yet; the triage
#: worker writes the final disposition). ``held``: routing faulted under ``on_fault =
#: "hold"`` (no todo until released).
DISPOSITION_ROUTED = "routed"
DISPOSITION_DROPPED = "dropped"
DISPOSITION_REPEAT = "repeat"
DISPOSITION_HELD = "held"
DISPOSITION_PENDING = "pending"
DISPOSITIONS = (
    DISPOSITION_ROUTED,
    DISPOSITION_DROPPED,
    DISPOSITION_REPEAT,
    DISPOSITION_HELD,
    DISPOSITION_PENDING,
)
#: A config's ``on_fault``: a faulted delivery takes its decision (the default, as ever) or
#: is held.
ON_FAULT = ("default", "hold")
FAULT_CAUSES = (
    "timeout",
    "error",
    "compile_error",
    "budget_exhausted",
    "sandbox_failure",
    "sandbox_busy",
)
#: A stage that misbehaved (``Fault.of_stage``); also the default's ``cause`` it led to.
CAUSE_STAGE_ERROR = "stage_error"
CAUSE_STAGE_TIMEOUT = "stage_timeout"
STAGE_CAUSES = (CAUSE_STAGE_ERROR, CAUSE_STAGE_TIMEOUT)


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
    """A rule (or the sandbox, ``rule_index == -1``) that failed during evaluation, or a
    whole stage that misbehaved (``stage`` set: :meth:`of_stage`)."""

    rule_index: int
    cause: str
    rule_id: str | None = None
    detail: str | None = None
    stage: str | None = None

    @classmethod
    def of_stage(cls, stage: str, cause: str = "stage_error", detail: str = "") -> Fault:
        """A stage's own fault: ``stage_error`` (it raised, answered garbage or wrote a bad
        trace) or ``stage_timeout`` (past its budget), with a one-line ``detail``."""
        return cls(-1, cause, detail=" ".join(detail.split()), stage=stage)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any]
        if self.stage is not None:
            doc = {"stage": self.stage, "cause": self.cause}
        else:
            doc = {"rule_index": self.rule_index, "cause": self.cause}
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
    #: The taken action's flags: at most once per subject and queue; attach a work order.
    once: bool = False
    work_order: bool = False
    #: The deferred stage that decides later (a live delivery's ``pending`` decision).
    pending: str | None = None

    @property
    def disposition(self) -> str:
        """What is stored with the event: ``pending``, ``dropped`` or ``routed``."""
        if self.pending is not None:
            return DISPOSITION_PENDING
        return DISPOSITION_DROPPED if self.drop else DISPOSITION_ROUTED

    def to_json(self) -> dict[str, Any]:
        return {"drop": self.drop, "queue": self.queue, "endpoints": list(self.endpoints)}


def json_copy(value: Any) -> Any:
    """A deep copy of a JSON document (dicts, lists, scalars): what ``copy.deepcopy`` does,
    several times faster, since every live delivery reads its webhook's config through it."""
    if isinstance(value, dict):
        return {k: json_copy(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_copy(v) for v in value]
    return value


@dataclass(frozen=True)
class RoutingConfig:
    """A webhook's routing configuration, spelled the same from the database to the API.

    ``rules`` are ordered (first match wins), each ``{id, name?, expr, action}``;
    ``default_action`` is None (the target queue) or an action; ``params`` is bound as
    ``$params``; ``on_fault`` is ``"default"`` or ``"hold"`` (:data:`ON_FAULT`). Built only by :func:`switchboard.routing.config.check_structure` (which
    normalizes and mints rule ids) or from a stored, already validated document.
    """

    rules: tuple[dict[str, Any], ...] = ()
    default_action: dict[str, Any] | None = None
    params: dict[str, Any] = field(default_factory=dict)
    on_fault: str = "default"
    #: Per-lane (queue) settings: ``{queue: {"once_ttl_s": seconds}}``, an at-most-once
    #: claim in that lane expiring after so long (absent: claims never expire).
    lanes: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: How many days this webhook's events are kept (None: ``[retention] events_days``).
    events_days: int | None = None

    def once_ttl_s(self, queue: str) -> int | None:
        """How long a once claim in ``queue`` holds, or None: until released."""
        ttl = (self.lanes.get(queue) or {}).get("once_ttl_s")
        return ttl if isinstance(ttl, int) and not isinstance(ttl, bool) else None

    def to_json(self) -> dict[str, Any]:
        """A deep copy as ``{"rules", "default_action", "params"}`` (what is stored and shown),
        with ``on_fault``, ``lanes`` and ``events_days`` only when not the default (so older
        configs hash the same)."""
        doc: dict[str, Any] = json_copy(
            {
                "rules": list(self.rules),
                "default_action": self.default_action,
                "params": self.params,
            }
        )
        if self.on_fault != "default":
            doc["on_fault"] = self.on_fault
        if self.lanes:
            doc["lanes"] = json_copy(self.lanes)
        if self.events_days is not None:
            doc["events_days"] = self.events_days
        return doc

    def holds(self, trace: dict[str, Any]) -> bool:
        """Whether a delivery with this decision trace is held: ``on_fault = "hold"`` and a
        rule, the sandbox or a stage faulted on it."""
        if self.on_fault != "hold":
            return False
        return any(
            f.get("cause") in FAULT_CAUSES or f.get("cause") in STAGE_CAUSES
            for f in trace.get("faults") or ()
        )

    @classmethod
    def from_json(cls, doc: dict[str, Any] | None, *, copy: bool = True) -> RoutingConfig:
        """A config from its stored form; missing keys read as empty.

        ``copy=False`` adopts ``doc``'s rules as they are: for a document nobody else holds
        (a row the database just returned), where a copy would only cost time.
        """
        doc = json_copy(doc or {}) if copy else (doc or {})
        return cls(
            rules=tuple(doc.get("rules") or ()),
            default_action=doc.get("default_action"),
            params=dict(doc.get("params") or {}),
            on_fault=str(doc.get("on_fault") or "default"),
            lanes=dict(doc.get("lanes") or {}),
            events_days=doc.get("events_days") or None,
        )


@dataclass(frozen=True)
class StageResult:
    """A stage's answer: a decision (evaluation stops) or none, plus faults seen."""

    decision: Decision | None = None
    faults: tuple[Fault, ...] = ()


class NotYet(Exception):
    """Raised by a deferred stage run by the triage worker (``ctx.deferred``) that cannot
    decide yet (the llm stage's spent budget, with ``on_budget = "wait"``): the event stays
    pending, claimable again after ``retry_after_s``, the attempt uncounted. Anywhere else
    (inline, a dry run) it is a stage error like any other exception."""

    def __init__(self, reason: str, retry_after_s: float) -> None:
        super().__init__(reason)
        self.retry_after_s = max(0.0, float(retry_after_s))


@runtime_checkable
class ValidatingStage(Protocol):
    """A stage that checks its own part of a routing config when it is saved (optional).

    The host has already checked the structure, actions, params and grant; the stage
    checks what only it understands (the rules stage compiles every expression) and
    raises :class:`switchboard.errors.RuleValidationError` naming the rule. Dry runs call
    it too, so a candidate config is refused exactly as a save would refuse it.

    A stage whose ``validate`` also takes a ``webhook`` keyword gets the webhook row the
    config is for (its ``id`` and ``owner_human``; ``{}`` offline), e.g. to charge the work
    to that owner's share of a shared resource. The host passes it only to stages that
    declare it, so a stage written against ``validate(config)`` keeps working.
    """

    name: str

    async def validate(self, config: RoutingConfig) -> None:
        """Raise ``RuleValidationError`` when ``config`` is not acceptable to this stage."""
        ...


class Completion(str):
    """A provider's answer text that also reports the call's token ``usage``
    (``{"prompt_tokens", "completion_tokens"}`` as the provider counted them, or None).

    A ``str``: a provider that returns plain text still works (its usage is estimated).
    """

    usage: dict[str, int] | None = None

    def __new__(cls, text: str, usage: dict[str, int] | None = None) -> Completion:
        made = super().__new__(cls, text)
        made.usage = usage
        return made


@runtime_checkable
class LLMProvider(Protocol):
    """What ``switchboard_register_llm_providers`` registers (used by an LLM triage stage)."""

    name: str

    async def complete(
        self, model: str, system: str, prompt: str, schema: dict[str, Any], timeout: float
    ) -> str:
        """The model's raw answer text for ``prompt`` (``system`` instructs the model,
        ``schema`` is the JSON Schema the answer must follow, ``timeout`` in seconds).

        Raise ``TimeoutError`` when ``timeout`` passes and any other exception on a
        transport or server error; its message is recorded in the trace, so it never
        carries a credential. The caller validates the text: never the provider. A
        :class:`Completion` carries the provider's token counts with the text.
        """
        ...


# --------------------------------------------------------------------------------------
# History: every rule's verdict, from a stage that can report them
# --------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------
# History: how each stage is replayed over stored deliveries
# --------------------------------------------------------------------------------------

#: ``stage.replay``: re-run the stage on the stored envelope (the default: a stage is
#: assumed deterministic), or take its verdict from the event's stored trace (a stage that
#: must not be asked again: the ``llm`` stage costs money and is not reproducible).
REPLAY_RERUN = "rerun"
REPLAY_STORED = "stored"
REPLAYS = (REPLAY_RERUN, REPLAY_STORED)

#: What one stage said on one delivery, in a replay (``explain_webhook_event``'s
#: ``stages``): it decided, passed, faulted, or was not reached (an earlier stage decided
#: or faulted). ``unknown``: a stored stage that was never asked live (an earlier stage
#: decided then) and is not asked now; the replay goes on as if it passed.
SAID_DECIDED = "decided"
SAID_PASSED = "passed"
SAID_FAULTED = "faulted"
SAID_NOT_REACHED = "not_reached"
SAID_UNKNOWN = "unknown"
SAIDS = (SAID_DECIDED, SAID_PASSED, SAID_FAULTED, SAID_NOT_REACHED, SAID_UNKNOWN)


def replay_of(stage: object) -> str:
    """How history replays ``stage``: ``rerun`` when it declares nothing (or ``rerun``),
    else ``stored`` (any other value: when in doubt, a stage is never asked again)."""
    mode = getattr(stage, "replay", REPLAY_RERUN)
    return REPLAY_RERUN if mode == REPLAY_RERUN else REPLAY_STORED


@dataclass
class StageSaid:
    """What one stage said in a replay, in stage order (:data:`SAIDS`).

    ``decision`` is set when it decided, ``fault`` when it faulted; ``replay`` is how it
    was replayed (:data:`REPLAYS`): a ``stored`` stage's verdict was read from the trace.
    """

    stage: str
    said: str
    replay: str = REPLAY_RERUN
    decision: Decision | None = None
    fault: Fault | None = None
    faults: tuple[Fault, ...] = ()

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"stage": self.stage, "said": self.said, "replay": self.replay}
        if self.decision is not None:
            doc["decision"] = {**self.decision.to_json(), "trace": self.decision.trace}
        if self.fault is not None:
            doc["fault"] = self.fault.to_json()
        if self.faults:
            doc["faults"] = [f.to_json() for f in self.faults]
        return doc
