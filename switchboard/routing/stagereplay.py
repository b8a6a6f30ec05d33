"""Replay one stored delivery through every enabled stage, in order, as live routing does.

The loop is live routing's own (:func:`.route.route`); only each stage's turn differs:

- a stage that reports rule verdicts (``VerdictStage``: the rules stage) answers from the
  verdicts history evaluated for it in one batch, exactly as its live ``route`` would;
- a stage that declares ``replay = "stored"`` (the llm stage) is never asked: its verdict
  is read from the event's stored trace (decided, faulted or passed), and when it was never
  asked live (an earlier stage decided then) it says ``unknown`` and the replay goes on;
- any other stage (a third party's, by default) is re-run on the stored envelope, under
  its time budget, its answer and trace checked as live.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..contract.routing import (
    REPLAY_STORED,
    SAID_DECIDED,
    SAID_FAULTED,
    SAID_NOT_REACHED,
    SAID_PASSED,
    SAID_UNKNOWN,
    StageSaid,
    replay_of,
)
from .decide import decide, default_decision, resolve
from .model import (
    CAUSE_STAGE_ERROR,
    STAGE_CAUSES,
    STAGE_DEFAULT,
    STAGE_RULE,
    Decision,
    Fault,
    Grant,
    RoutingConfig,
    RoutingContext,
    RoutingStage,
    StageResult,
    json_copy,
)
from .route import route
from .stagecall import budget_ms, call_stage
from .verdicts import RuleVerdict, match_of

if TYPE_CHECKING:
    from ..runtime import Runtime


@dataclass
class Replayed:
    """A replay's decision and what each stage said, in order."""

    decision: Decision
    said: list[StageSaid] = field(default_factory=list)

    @property
    def decided_by(self) -> str:
        """The name of the registered stage that decided, or ``default``."""
        for s in self.said:
            if s.said == SAID_DECIDED:
                return s.stage
        return STAGE_DEFAULT

    @property
    def ended_by(self) -> str | None:
        """The stage whose answer ended the loop (it decided or faulted), or None."""
        for s in self.said:
            if s.said in (SAID_DECIDED, SAID_FAULTED):
                return s.stage
        return None

    @property
    def stored(self) -> StageSaid | None:
        """The stored stage whose verdict (read, not re-asked) decided, or None."""
        for s in self.said:
            if s.said == SAID_DECIDED and s.replay == REPLAY_STORED:
                return s
        return None

    def reached(self, stage: str) -> bool:
        """Whether ``stage`` had its turn (it was not after the deciding stage)."""
        return any(s.stage == stage and s.said != SAID_NOT_REACHED for s in self.said)


def _named(stage: object) -> str:
    return str(getattr(stage, "trace_name", None) or getattr(stage, "name", ""))


def live_decider(stages: Sequence[RoutingStage], trace: Mapping[str, Any]) -> int | None:
    """The position in ``stages`` of the stage whose answer ended live routing (decided or
    faulted), ``len(stages)`` when every stage passed, None when it is not one of them."""
    ender = _ending_fault(trace)
    if ender is not None:
        names = [s.name for s in stages]
        return names.index(ender["stage"]) if ender["stage"] in names else None
    said = trace.get("stage")
    if said == STAGE_DEFAULT and "rule_index" in trace:
        said = STAGE_RULE  # the rules decided the default: their rule is no longer granted
    for i, stage in enumerate(stages):
        if said == _named(stage) or (said == STAGE_DEFAULT and stage.name in trace):
            return i
    return len(stages) if said == STAGE_DEFAULT else None


def stored_answer(
    stage: RoutingStage,
    trace: Mapping[str, Any] | None,
    ctx: RoutingContext,
    stages: Sequence[RoutingStage],
) -> StageResult | Fault | None:
    """``stage``'s verdict as the stored ``trace`` recorded it, under ``ctx`` (the config
    and grant replayed): its fault, its decision, or a pass. None: it was never asked."""
    if not isinstance(trace, Mapping):
        return None
    ender = _ending_fault(trace)
    if ender is not None and ender["stage"] == stage.name:
        return _fault_of(stage, ender)
    position = live_decider(stages, trace)
    mine = next((i for i, s in enumerate(stages) if s is stage), None)
    if position is None or mine is None or position < mine:
        return None
    if position > mine:
        # it passed, with the faults it reported of itself (not the one that ended routing)
        own = tuple(
            _fault_of(stage, f)
            for f in trace.get("faults") or ()
            if isinstance(f, dict) and f.get("stage") == stage.name and f is not ender
        )
        return StageResult(faults=own)
    return StageResult(_stored_decision(stage, trace, ctx))


def _fault_of(stage: RoutingStage, doc: Mapping[str, Any]) -> Fault:
    return Fault.of_stage(
        stage.name, str(doc.get("cause") or CAUSE_STAGE_ERROR), str(doc.get("detail") or "")
    )


def _ending_fault(trace: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The stage fault that ended live routing, or None.

    A stage that misbehaves ends routing with the default, caused by its fault, which is
    then the trace's last; a stage fault before it (or with any other cause) is one a
    stage reported of itself while passing (``Fault.of_stage`` in its ``StageResult``).
    """
    if trace.get("stage") != STAGE_DEFAULT or trace.get("cause") not in STAGE_CAUSES:
        return None
    faults = [f for f in trace.get("faults") or () if isinstance(f, dict)]
    last = faults[-1] if faults else None
    return last if last is not None and last.get("stage") else None


def _stored_decision(
    stage: RoutingStage, trace: Mapping[str, Any], ctx: RoutingContext
) -> Decision | None:
    """The stored decision of ``stage`` replayed under ``ctx``: its action under the grant
    as it is now (None, a pass, when the grant no longer reaches it), or the default of
    the config replayed when the stage fell back to the default; its detail kept."""
    detail = json_copy(trace.get(stage.name))
    if trace.get("stage") == STAGE_DEFAULT:
        decision = default_decision(
            ctx.grant, ctx.config.default_action, ctx.faults, cause=trace.get("cause")
        )
    else:
        action = trace.get("action") if isinstance(trace.get("action"), dict) else {}
        found = _action_decision(_named(stage), dict(action or {}), ctx.grant)
        if found is None:
            return None
        decision = found
        if ctx.faults:
            decision.trace["faults"] = [f.to_json() for f in ctx.faults]
    if detail is not None:
        decision.trace[stage.name] = detail
    return decision


def _action_decision(said: str, action: dict[str, Any], grant: Grant) -> Decision | None:
    if action.get("drop") is True:
        return Decision(True, None, (), {"stage": said, "action": {"drop": True}})
    reached = resolve(action, grant)
    if reached is None:
        return None
    return Decision(
        False,
        reached[0],
        reached[1],
        {"stage": said, "action": json_copy(action)},
        once=action.get("once") is True,
        work_order=action.get("work_order") is True,
    )


async def replay(
    stages: Sequence[RoutingStage],
    webhook: dict[str, Any],
    config: RoutingConfig,
    envelope: dict[str, Any] | None,
    grant: Grant,
    *,
    stored_trace: Mapping[str, Any] | None,
    verdict_stage: object | None = None,
    verdicts: Sequence[RuleVerdict] = (),
    runtime: Runtime | None = None,
    stage_timeout_ms: int | None = None,
) -> Replayed:
    """One stored delivery (``envelope``, its ``stored_trace``) replayed under ``config``.

    ``verdicts`` are ``verdict_stage``'s rule verdicts on this envelope for ``config``.
    ``envelope`` may be None when no stage is re-run (none but the verdict stage and
    stored stages are enabled).
    """
    unknown: set[str] = set()

    async def turn(stage: RoutingStage, ctx: RoutingContext) -> StageResult | Fault:
        if stage is verdict_stage:
            match = match_of(config, verdicts)
            if match.rule_index is None:
                return StageResult(None, match.faults)
            return StageResult(decide(config, match, ctx.grant))
        if replay_of(stage) == REPLAY_STORED:
            answer = stored_answer(stage, stored_trace, ctx, stages)
            if answer is None:
                unknown.add(stage.name)
                return StageResult()
            return answer
        return await call_stage(stage, ctx, budget_ms(stage, stage_timeout_ms))

    said: list[StageSaid] = []
    decision = await route(
        stages,
        webhook,
        config,
        envelope if envelope is not None else {},
        grant,
        runtime=runtime,
        turn=turn,
        said=said,
    )
    for s in said:
        if s.stage in unknown and s.said == SAID_PASSED:
            s.said = SAID_UNKNOWN
    return Replayed(decision, said)


def needs_envelope(stages: Sequence[RoutingStage], verdict_stage: object | None) -> bool:
    """Whether any stage is re-run (and so needs the stored envelope itself)."""
    return any(s is not verdict_stage and replay_of(s) != REPLAY_STORED for s in stages)
