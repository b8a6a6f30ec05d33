"""One stage's turn: called under its time budget, its answer and its trace checked, and
any misbehaviour turned into a fault naming the stage (never a lost delivery)."""

from __future__ import annotations

import asyncio
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from ..contract.errors import StoreUnavailable
from .deadline import within
from .model import (
    CAUSE_STAGE_ERROR,
    CAUSE_STAGE_TIMEOUT,
    STAGE_DEFAULT,
    Decision,
    Fault,
    NotYet,
    RoutingContext,
    RoutingStage,
    StageResult,
)
from .stagecheck import MAX_OWN_TIMEOUT_MS
from .trace import COMMON_KEYS, validate_fault, validate_trace

#: How soon a deferred run that found the database away is tried again.
STORE_RETRY_S = 1.0
#: What stops a task or the process: a stage's exception group carrying one is re-raised.
_STOPPING = (asyncio.CancelledError, KeyboardInterrupt, SystemExit)
#: ``[routing] stage_timeout_ms`` when the config does not say (a stage may ask for more).
DEFAULT_STAGE_TIMEOUT_MS = 5000


def stage_timeout_ms(runtime: Any) -> int:
    """``[routing] stage_timeout_ms`` of ``runtime``'s config."""
    value = runtime.config.section("routing").get("stage_timeout_ms")
    return int(value) if isinstance(value, int) else DEFAULT_STAGE_TIMEOUT_MS


def budget_ms(stage: RoutingStage, configured: int | None) -> int:
    """The stage's time budget: its own ``timeout_ms`` when it declares a larger one, up
    to :data:`MAX_OWN_TIMEOUT_MS` (a stage cannot hold a delivery for hours)."""
    base = configured if configured is not None else DEFAULT_STAGE_TIMEOUT_MS
    own = getattr(stage, "timeout_ms", None)
    if not isinstance(own, int) or own <= 0:
        return base
    return max(base, min(own, MAX_OWN_TIMEOUT_MS))


async def call_stage(
    stage: RoutingStage, ctx: RoutingContext, timeout_ms: int
) -> StageResult | Fault:
    """What ``stage`` answered for ``ctx``, or the fault it earned (which the caller turns
    into the default)."""
    try:
        result = await within(stage.route(ctx), timeout_ms / 1000)
    except TimeoutError:
        return Fault.of_stage(stage.name, CAUSE_STAGE_TIMEOUT, f"no answer within {timeout_ms} ms")
    except NotYet:
        if ctx.deferred:
            raise  # the triage worker leaves the event pending (see NotYet)
        return Fault.of_stage(stage.name, CAUSE_STAGE_ERROR, "raised NotYet outside a deferred run")
    except _STOPPING:
        raise  # the task or the process is being stopped: never the stage's to swallow
    except BaseException as exc:  # a third party's bug costs a fault, never the delivery
        if isinstance(exc, BaseExceptionGroup) and exc.subgroup(_STOPPING) is not None:
            raise
        if ctx.deferred and isinstance(exc, StoreUnavailable):
            # The database is away, not the stage wrong: the event stays pending.
            raise NotYet("the database is unavailable", STORE_RETRY_S) from None
        return Fault.of_stage(stage.name, CAUSE_STAGE_ERROR, f"raised {_describe(exc)}")
    if not isinstance(result, StageResult):
        return Fault.of_stage(
            stage.name,
            CAUSE_STAGE_ERROR,
            f"returned {type(result).__name__}, not a StageResult",
        )
    if not isinstance(result.faults, (list, tuple)):
        return Fault.of_stage(
            stage.name, CAUSE_STAGE_ERROR, f"reported faults as a {type(result.faults).__name__}"
        )
    for reported in result.faults:
        problem = fault_problem(stage, reported)
        if problem is not None:
            # A bad fault would fail the stored trace's validation (a 500, nothing stored).
            return Fault.of_stage(stage.name, CAUSE_STAGE_ERROR, problem)
    if result.decision is not None:
        problem = trace_problem(stage, result.decision)
        if problem is not None:
            return Fault.of_stage(stage.name, CAUSE_STAGE_ERROR, problem)
    return result


async def stage_defers(stage: RoutingStage, ctx: RoutingContext, timeout_ms: int) -> bool:
    """Whether the deferred ``stage`` has work for ``ctx`` (its ``defers``; True without one).

    A ``defers`` that raises or overruns leaves the delivery pending: the stage's own run
    then meets the same trouble and earns its fault there, off the producer's request.
    """
    ask = getattr(stage, "defers", None)
    if ask is None:
        return True
    try:
        return bool(await within(ask(ctx), timeout_ms / 1000))
    except Exception:
        return True


def fault_problem(stage: RoutingStage, fault: Any) -> str | None:
    """What is wrong with a fault ``stage`` reported while passing, or None.

    A stage's fault names that stage (its name is a ``/metrics`` label: registered names
    only) and fits the trace schema's fault, as the stored trace will be validated."""
    if not isinstance(fault, Fault):
        return f"reported a {type(fault).__name__} as a fault"
    if fault.stage is not None and fault.stage != stage.name:
        return (
            f"reported a fault of stage {fault.stage!r}: a stage reports its own ({stage.name!r})"
        )
    try:
        doc = fault.to_json()
    except Exception as exc:  # a detail that is no string, say
        return f"reported a fault that cannot be written: {_describe(exc)}"
    try:
        validate_fault(doc)
    except ValueError as exc:
        return f"reported an {exc}"
    return None


def trace_problem(stage: RoutingStage, decision: Any) -> str | None:
    """What is wrong with the trace of ``stage``'s ``decision``, or None."""
    if not isinstance(decision, Decision):
        return f"decided with a {type(decision).__name__}, not a Decision"
    trace = decision.trace
    if not isinstance(trace, dict):
        return "wrote a trace that is not an object"
    named = getattr(stage, "trace_name", None) or stage.name
    said = trace.get("stage")
    if said not in (named, STAGE_DEFAULT):
        return f"wrote trace stage {said!r}: a stage names itself ({named!r}) or 'default'"
    for key in trace:
        if key not in COMMON_KEYS and key != stage.name:
            return (
                f"wrote trace key {key!r}: a stage's own detail goes under its name "
                f"({stage.name!r})"
            )
    try:
        validate_trace(trace)
    except ValueError as exc:
        return f"wrote an {exc}"
    schema = getattr(stage, "trace_schema", None)
    if schema is not None and stage.name in trace:
        try:
            error = next(iter(_validator(stage).iter_errors(trace[stage.name])), None)
        except SchemaError as exc:
            return f"declares a trace_schema that is not a JSON Schema: {exc.message}"
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path)
            at = f"{stage.name}/{where}" if where else stage.name
            return f"wrote an invalid routing trace at {at}: {error.message}"
    return None


#: Each stage's trace validator, by the stage object (stages live as long as the process).
_VALIDATORS: dict[int, tuple[object, Draft202012Validator]] = {}


def _validator(stage: RoutingStage) -> Draft202012Validator:
    found = _VALIDATORS.get(id(stage))
    if found is not None and found[0] is stage:
        return found[1]
    schema = stage.trace_schema  # type: ignore[attr-defined]
    Draft202012Validator.check_schema(schema)
    validator = Draft202012Validator(schema)
    _VALIDATORS[id(stage)] = (stage, validator)
    return validator


def _describe(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__
