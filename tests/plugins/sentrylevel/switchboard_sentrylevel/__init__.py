"""A third party's routing stage, written from ``switchboard.plugin`` alone: it routes a
Sentry event by its ``level``, and (for the test suite) misbehaves on request.

``payload.level``: ``fatal`` decides the ``urgent`` queue, ``debug`` drops; ``raise``,
``garbage``, ``badtrace``, ``badkey``, ``badfault`` and ``slow`` misbehave in the six ways a
stage can; ``stale`` passes with a fault of its own (``Fault.of_stage``: it could not do
its job, the stages after it decide); anything else passes to the stages after it.
"""

from __future__ import annotations

from typing import Any

import anyio

from switchboard.plugin import (
    Decision,
    Fault,
    RoutingContext,
    StageRegistry,
    StageResult,
    hookimpl,
    stage_decision,
)

NAME = "sentry_level"


class SentryLevelStage:
    """Route by ``payload.level``; the detail it writes is ``{"level": ...}``."""

    name = NAME
    trace_schema: dict[str, Any] = {
        "type": "object",
        "required": ["level"],
        "properties": {"level": {"type": "string"}},
        "additionalProperties": False,
    }

    async def route(self, ctx: RoutingContext) -> Any:
        payload = ctx.envelope.get("payload")
        level = payload.get("level") if isinstance(payload, dict) else None
        if level == "fatal":
            decided = stage_decision(NAME, {"queue": "urgent"}, ctx.grant, {"level": level})
            return StageResult(decision=decided)
        if level == "debug":
            return StageResult(
                decision=stage_decision(NAME, {"drop": True}, ctx.grant, {"level": level})
            )
        if level == "raise":
            raise RuntimeError("the level table is not loaded")
        if level == "garbage":
            return {"queue": "urgent"}
        if level == "badtrace":
            decided = stage_decision(NAME, {"queue": "urgent"}, ctx.grant, {"level": 5})
            return StageResult(decision=decided)
        if level == "badkey":
            decided = stage_decision(NAME, {"queue": "urgent"}, ctx.grant, {"level": "x"})
            assert isinstance(decided, Decision)
            decided.trace["sentry"] = {"oops": True}
            return StageResult(decision=decided)
        if level == "stale":
            # It cannot judge this one, says so, and lets the stages after it decide.
            return StageResult(faults=[Fault.of_stage(NAME, detail="the level table is stale")])
        if level == "badfault":
            # A fault of a cause no trace takes: the host must refuse it, naming this stage.
            return StageResult(faults=[Fault.of_stage(NAME, "level_unknown", "no such level")])
        if level == "slow":
            await anyio.sleep(60)
        return StageResult()


@hookimpl
def switchboard_register_routing_stages(register: StageRegistry) -> None:
    """The ``sentry_level`` stage (enabled where ``routing.stages`` lists it)."""
    register.add(SentryLevelStage())
