"""One stage's turn (routing/stagecall.py): every way a stage can misbehave becomes a fault
naming it, and route() then takes the default; a well-behaved stage's answer passes."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from switchboard.plugin import (
    Decision,
    Fault,
    Grant,
    RoutingConfig,
    RoutingContext,
    StageResult,
    Target,
    stage_decision,
)
from switchboard.routing.route import route
from switchboard.routing.stagecall import budget_ms, call_stage
from switchboard.routing.stagecheck import MAX_OWN_TIMEOUT_MS, stage_problem

GRANT = Grant(target_queue="inbox", queues=("inbox", "urgent"), targets=(Target("e1", ("inbox",)),))


class Stage:
    """A stage answering ``answer`` (a value, or a callable raising or sleeping)."""

    def __init__(self, answer: Any, name: str = "mine", **attrs: Any) -> None:
        self.name = name
        self.answer = answer
        for k, v in attrs.items():
            setattr(self, k, v)

    async def route(self, ctx: RoutingContext) -> Any:
        if callable(self.answer):
            return await self.answer()
        return self.answer


def _ctx() -> RoutingContext:
    return RoutingContext(
        webhook={}, envelope={}, grant=GRANT, config=RoutingConfig.from_json(None)
    )


async def _raise() -> Any:
    raise KeyError("level")


class Halt(BaseException):
    """A BaseException of a stage's own (not a cancellation)."""


async def _raise_base() -> Any:
    raise Halt("stop")


async def _sleep() -> Any:
    await anyio.sleep(10)


def _decided(trace: dict[str, Any]) -> StageResult:
    return StageResult(
        decision=Decision(drop=False, queue="urgent", endpoints=("e1",), trace=trace)
    )


SCHEMA = {"type": "object", "required": ["level"], "additionalProperties": False}

CASES: list[tuple[str, Stage, str, str]] = [
    ("raises", Stage(_raise), "stage_error", "raised KeyError: 'level'"),
    ("returns garbage", Stage("urgent"), "stage_error", "returned str, not a StageResult"),
    ("returns None", Stage(None), "stage_error", "returned NoneType, not a StageResult"),
    (
        "decides with garbage",
        Stage(StageResult(decision={"queue": "x"})),  # type: ignore[arg-type]
        "stage_error",
        "decided with a dict, not a Decision",
    ),
    (
        "a fault that is not a Fault",
        Stage(StageResult(faults=("oops",))),  # type: ignore[arg-type]
        "stage_error",
        "reported a str as a fault",
    ),
    (
        "names another stage",
        Stage(_decided({"stage": "rule", "action": {"queue": "urgent"}})),
        "stage_error",
        "wrote trace stage 'rule': a stage names itself ('mine') or 'default'",
    ),
    (
        "writes another stage's key",
        Stage(_decided({"stage": "mine", "action": {"queue": "urgent"}, "llm": {}})),
        "stage_error",
        "wrote trace key 'llm': a stage's own detail goes under its name ('mine')",
    ),
    (
        "writes a key of no stage",
        Stage(_decided({"stage": "mine", "action": {"queue": "urgent"}, "other": 1})),
        "stage_error",
        "wrote trace key 'other': a stage's own detail goes under its name ('mine')",
    ),
    (
        "fails its own schema",
        Stage(
            _decided({"stage": "mine", "action": {"queue": "urgent"}, "mine": {"lvl": 1}}),
            trace_schema=SCHEMA,
        ),
        "stage_error",
        "wrote an invalid routing trace at mine: 'level' is a required property",
    ),
    ("goes past its budget", Stage(_sleep), "stage_timeout", "no answer within 50 ms"),
    ("raises a BaseException", Stage(_raise_base), "stage_error", "raised Halt: stop"),
    (
        "reports a fault of another stage",
        Stage(StageResult(faults=(Fault.of_stage("rules"),))),
        "stage_error",
        "reported a fault of stage 'rules': a stage reports its own ('mine')",
    ),
    (
        "reports a fault of no known cause",
        Stage(StageResult(faults=(Fault.of_stage("mine", "bogus"),))),
        "stage_error",
        "reported an invalid fault at cause: 'bogus' is not one of",
    ),
    (
        "reports a rule fault below -1",
        Stage(StageResult(faults=(Fault(-2, "error"),))),
        "stage_error",
        "reported an invalid fault at rule_index: -2 is less than the minimum of -1",
    ),
    (
        "reports a fault whose detail is no text",
        Stage(StageResult(faults=(Fault(0, "error", detail=7),))),  # type: ignore[arg-type]
        "stage_error",
        "reported a fault that cannot be written: TypeError",
    ),
    (
        "reports faults that are no sequence",
        Stage(StageResult(faults=None)),  # type: ignore[arg-type]
        "stage_error",
        "reported faults as a NoneType",
    ),
]


@pytest.mark.parametrize("stage,cause,detail", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
async def test_each_misbehaviour_is_a_fault_naming_the_stage(
    stage: Stage, cause: str, detail: str
) -> None:
    got = await call_stage(stage, _ctx(), 50)  # type: ignore[arg-type]
    assert isinstance(got, Fault), got
    assert (got.stage, got.cause) == ("mine", cause)
    assert got.detail is not None and got.detail.startswith(detail), got.detail
    decision = await route(
        [stage], {}, RoutingConfig.from_json(None), {}, GRANT, stage_timeout_ms=50
    )  # type: ignore[list-item]
    assert decision.trace == {
        "stage": "default",
        "cause": cause,
        "action": {"queue": "inbox"},
        "faults": [got.to_json()],
    }


async def test_a_well_behaved_stage_decides_with_its_own_detail() -> None:
    decided = stage_decision("mine", {"queue": "urgent"}, GRANT, {"level": "fatal"})
    stage = Stage(
        StageResult(decision=decided), trace_schema=SCHEMA | {"properties": {"level": {}}}
    )
    got = await call_stage(stage, _ctx(), 50)  # type: ignore[arg-type]
    assert isinstance(got, StageResult) and got.decision is decided
    assert decided is not None and decided.trace == {
        "stage": "mine",
        "action": {"queue": "urgent"},
        "mine": {"level": "fatal"},
    }
    # a queue the grant does not reach: no decision, the stage passes
    assert stage_decision("mine", {"queue": "elsewhere"}, GRANT) is None


async def test_the_stages_after_a_passing_stage_still_decide() -> None:
    passing = Stage(StageResult(), name="first")
    deciding = Stage(
        StageResult(decision=stage_decision("second", {"drop": True}, GRANT)), name="second"
    )
    decision = await route(
        [passing, deciding],
        {},
        RoutingConfig.from_json(None),
        {},
        GRANT,  # type: ignore[list-item]
    )
    assert decision.drop and decision.trace == {"stage": "second", "action": {"drop": True}}


def test_a_stage_may_ask_for_a_longer_budget_never_a_shorter_one() -> None:
    assert budget_ms(Stage(None), 300) == 300
    assert budget_ms(Stage(None, timeout_ms=20_000), 300) == 20_000
    assert budget_ms(Stage(None, timeout_ms=10), 300) == 300
    assert budget_ms(Stage(None), None) == 5000
    # a stage's own ask is capped (the operator's [routing] stage_timeout_ms is not)
    assert budget_ms(Stage(None, timeout_ms=3_600_000), 300) == MAX_OWN_TIMEOUT_MS == 150_000
    assert budget_ms(Stage(None, timeout_ms=3_600_000), 600_000) == 600_000


async def test_a_passing_stage_keeps_the_fault_it_reports_of_itself() -> None:
    own = Fault.of_stage("mine", detail="the level table\nis stale")
    stage = Stage(StageResult(faults=(own,)))
    got = await call_stage(stage, _ctx(), 50)  # type: ignore[arg-type]
    assert isinstance(got, StageResult) and got.faults == (own,)
    decision = await route(
        [stage], {}, RoutingConfig.from_json(None), {}, GRANT, stage_timeout_ms=50
    )  # type: ignore[list-item]
    assert decision.trace == {
        "stage": "default",
        "cause": "no_match_default",
        "action": {"queue": "inbox"},
        "faults": [{"stage": "mine", "cause": "stage_error", "detail": "the level table is stale"}],
    }


@pytest.mark.parametrize("stop", [KeyboardInterrupt, SystemExit])
async def test_a_stop_raised_in_a_stage_is_never_swallowed(stop: type[BaseException]) -> None:
    async def _stop() -> Any:
        raise stop()

    with pytest.raises(stop):
        await call_stage(Stage(_stop), _ctx(), 50)  # type: ignore[arg-type]


class Named:
    """A stage object with only the attributes a registration check reads."""

    def __init__(self, **attrs: Any) -> None:
        for k, v in attrs.items():
            setattr(self, k, v)


@pytest.mark.parametrize(
    "name,attrs,says",
    [
        ("Sentry-Level", {}, "name 'Sentry-Level' is not a trace name"),
        ("level\n", {}, "is not a trace name"),
        ("x" * 65, {}, "is not a trace name"),
        ("default", {}, "name 'default' is reserved"),
        ("pending", {}, "name 'pending' is reserved"),
        ("action", {}, "name 'action' is reserved"),
        ("faults", {}, "name 'faults' is reserved"),
        ("rule", {}, "what the rules stage writes"),
        ("mine", {"trace_name": "Mine"}, "trace_name 'Mine' is not a trace name"),
        ("mine", {"trace_name": "cause"}, "trace_name 'cause' is reserved"),
        ("mine", {"timeout_ms": "5s"}, "timeout_ms must be a positive integer"),
        ("mine", {"timeout_ms": 0}, "timeout_ms must be a positive integer"),
        ("mine", {"timeout_ms": True}, "timeout_ms must be a positive integer"),
        ("mine", {"trace_schema": {"type": "nothing"}}, "trace_schema is not a JSON Schema"),
    ],
)
def test_a_stage_is_refused_at_registration_naming_what_is_wrong(
    name: str, attrs: dict[str, Any], says: str
) -> None:
    problem = stage_problem(Named(name=name, **attrs), name)
    assert problem is not None and says in problem, problem


@pytest.mark.parametrize(
    "name,attrs",
    [
        ("sentry_level", {"trace_schema": {"type": "object"}, "timeout_ms": 10_000_000}),
        ("rules", {"trace_name": "rule"}),
        ("llm", {"timeout_ms": 125_000}),
    ],
)
def test_a_well_formed_stage_registers(name: str, attrs: dict[str, Any]) -> None:
    assert stage_problem(Named(name=name, **attrs), name) is None
