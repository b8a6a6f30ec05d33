"""A history call over slow rules answers near its deadline with what it evaluated, not
after a whole page's evaluation with one event: the batches sent to the sandbox are sized
by how fast the rules go."""

from __future__ import annotations

import time

import pytest

from switchboard.routing.verdicts import verdict_stage
from switchboard.runtime import Runtime
from switchboard.service import history

from .test_reroute import _seeded

#: A rule that never ends: every event costs its evaluator's timeout (and a new evaluator).
LOOPING = [{"id": "loops", "expr": "def f: f; f", "action": {"drop": True}}]
DEADLINE_S = 2.0
EVENTS = 120


@pytest.mark.parametrize("verb", ["diff", "lint"])
async def test_a_call_over_looping_rules_stops_near_its_deadline_with_its_work(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch, verb: str
) -> None:
    rt = runtime
    owner, _m, hook, _token = await _seeded(rt, EVENTS)
    stage = verdict_stage(rt.stages)
    assert stage is not None
    monkeypatch.setattr(stage, "history_deadline_s", DEADLINE_S)
    if verb == "lint":
        from switchboard.service import rules

        await rules.set_rules(rt, owner, hook, LOOPING)
    began = time.monotonic()
    if verb == "diff":
        doc = await history.diff_rules(rt, owner, hook, rules=LOOPING, last=EVENTS)
    else:
        doc = await history.lint_rules(rt, owner, hook, last=EVENTS)
    took = time.monotonic() - began
    # Before, one batch held all 120 events (~10 s of timeouts) and the call kept one.
    assert doc.get("stopped") == "deadline", doc
    assert doc["evaluated"] >= 4, doc
    assert took < 2 * DEADLINE_S + 2, took
    if verb == "diff":
        again = await history.diff_rules(rt, owner, hook, rules=LOOPING, cursor=doc["next_cursor"])
        assert again["evaluated"] >= 4, again
