"""History's replay of one stored delivery (routing/stagereplay.py): live routing's loop, a
re-run stage asked again, a ``replay = "stored"`` stage read from the trace and never
asked, the rules answered from their verdicts, and what each stage said, in order."""

from __future__ import annotations

from typing import Any

import pytest

from switchboard.plugin import (
    REPLAY_RERUN,
    REPLAY_STORED,
    Grant,
    RoutingConfig,
    RoutingContext,
    RuleVerdict,
    StageResult,
    Target,
    replay_of,
    stage_decision,
)
from switchboard.routing.route import route
from switchboard.routing.stagereplay import needs_envelope, replay

GRANT = Grant(
    target_queue="inbox",
    queues=("inbox", "urgent", "triage"),
    targets=(Target("e1", ("inbox", "urgent", "triage")),),
)
RULES = RoutingConfig.from_json(
    {"rules": [{"id": "r1", "expr": "true", "action": {"queue": "urgent"}}]}
)


class Level:
    """A deterministic third-party stage: ``fatal`` decides urgent, ``boom`` raises."""

    name = "level"

    def __init__(self) -> None:
        self.calls = 0

    async def route(self, ctx: RoutingContext) -> StageResult:
        self.calls += 1
        level = (ctx.envelope.get("payload") or {}).get("level")
        if level == "boom":
            raise RuntimeError("boom")
        if level == "fatal":
            return StageResult(stage_decision("level", {"queue": "urgent"}, ctx.grant, None))
        return StageResult()


class Rules:
    """Stands in for the rules stage: its verdicts answer, it is never called."""

    name = "rules"
    trace_name = "rule"
    history_max_events = 10
    history_deadline_s = 1.0

    async def route(self, ctx: RoutingContext) -> StageResult:
        raise AssertionError("the rules are answered from their verdicts")

    async def verdicts(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("not called here")


class Model:
    """A stored stage (like ``llm``): asking it again fails the test."""

    name = "model"
    replay = REPLAY_STORED

    async def route(self, ctx: RoutingContext) -> StageResult:
        raise AssertionError("a stored stage is never asked again")


def _env(level: str) -> dict[str, Any]:
    return {"payload": {"level": level}}


async def _replay(stages: list[Any], level: str, trace: Any, verdict: str = "false") -> Any:
    return await replay(
        stages,
        {},
        RULES,
        _env(level),
        GRANT,
        stored_trace=trace,
        verdict_stage=next((s for s in stages if isinstance(s, Rules)), None),
        verdicts=[RuleVerdict(verdict)],
    )


def test_replay_of_reads_the_attribute_and_defaults_to_a_rerun() -> None:
    assert replay_of(Level()) == REPLAY_RERUN
    assert replay_of(Model()) == REPLAY_STORED
    odd = Level()
    odd.replay = "never"  # type: ignore[attr-defined]
    assert replay_of(odd) == REPLAY_STORED  # when in doubt, never asked again
    assert needs_envelope([Rules(), Model()], None) is True  # Rules is not the verdict stage
    rules = Rules()
    assert needs_envelope([rules, Model()], rules) is False
    assert needs_envelope([Level(), rules], rules) is True


async def test_a_rerun_stage_before_the_rules_decides_as_live_and_the_rest_is_not_reached() -> None:
    level = Level()
    live = await route([level], {}, RULES, _env("fatal"), GRANT)
    out = await _replay([level, Rules(), Model()], "fatal", live.trace)
    assert out.decision.trace == live.trace and out.decided_by == "level"
    assert [(s.stage, s.said) for s in out.said] == [
        ("level", "decided"),
        ("rules", "not_reached"),
        ("model", "not_reached"),
    ]
    assert not out.reached("rules") and out.ended_by == "level" and out.stored is None


async def test_a_faulting_stage_replays_as_the_default_with_its_fault() -> None:
    out = await _replay([Level(), Rules()], "boom", None)
    assert out.decision.trace["cause"] == "stage_error"
    assert out.decision.trace["faults"][0]["stage"] == "level"
    assert [s.said for s in out.said] == ["faulted", "not_reached"]
    assert out.ended_by == "level" and out.decided_by == "default"


async def test_the_rules_answer_from_their_verdicts() -> None:
    out = await _replay([Level(), Rules(), Model()], "info", None, verdict="matched")
    assert out.decision.queue == "urgent" and out.decision.trace["rule_id"] == "r1"
    assert [s.said for s in out.said] == ["passed", "decided", "not_reached"]
    assert out.decided_by == "rules"


STORED_LLM = {
    "stage": "model",
    "action": {"queue": "triage"},
    "model": {"queue": "triage", "confidence": 0.9},
}


@pytest.mark.parametrize(
    ("trace", "said", "queue"),
    [
        # it decided live: its decision is taken again, with its detail
        (STORED_LLM, "decided", "triage"),
        # it fell back to the default live: the replayed config's default, its detail kept
        (
            {"stage": "default", "cause": "llm_error", "action": {"queue": "inbox"}, "model": {}},
            "decided",
            "inbox",
        ),
        # it passed live (the default decided after it)
        (
            {"stage": "default", "cause": "no_match_default", "action": {"queue": "inbox"}},
            "passed",
            "inbox",
        ),
        # never asked live (a rule decided first): unknown, the replay goes on as a pass
        ({"stage": "rule", "rule_index": 0, "action": {"queue": "urgent"}}, "unknown", "inbox"),
        # a sample payload: no trace at all
        (None, "unknown", "inbox"),
        # it faulted live: the same fault again
        (
            {
                "stage": "default",
                "cause": "stage_timeout",
                "action": {"queue": "inbox"},
                "faults": [{"stage": "model", "cause": "stage_timeout", "detail": "slow"}],
            },
            "faulted",
            "inbox",
        ),
    ],
)
async def test_a_stored_stage_is_read_from_the_trace_never_asked(
    trace: Any, said: str, queue: str
) -> None:
    out = await _replay([Level(), Rules(), Model()], "info", trace)
    [mine] = [s for s in out.said if s.stage == "model"]
    assert mine.said == said and mine.replay == REPLAY_STORED
    assert out.decision.queue == queue
    if said == "decided":
        assert out.stored is mine and out.decision.trace["model"] == trace["model"]
    if said == "faulted":
        assert out.decision.trace["faults"] == trace["faults"]


async def test_a_rule_no_longer_granted_was_the_rules_deciding_so_a_later_stored_stage_is_unknown() -> (
    None
):
    trace = {
        "stage": "default",
        "cause": "rule_not_granted",
        "rule_index": 0,
        "rule_id": "r1",
        "action": {"queue": "inbox"},
    }
    out = await _replay([Rules(), Model()], "info", trace)
    assert [(s.stage, s.said) for s in out.said] == [("rules", "passed"), ("model", "unknown")]
