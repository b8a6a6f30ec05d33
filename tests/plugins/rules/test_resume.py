"""The resume policy, as tables: a failed evaluator's attempt in, whose answer it is out."""

from __future__ import annotations

import signal
from typing import Any

import pytest
from switchboard_rules.policy import Attempt
from switchboard_rules.protocol import RULE_LIMIT, SWEEP
from switchboard_rules.resume import (
    HARD_DEADLINE,
    answered,
    began,
    carried,
    sweeps,
    swept_s,
)

ALARM = -signal.SIGALRM


def att(ran_s: float = 0.0, **kw: Any) -> Attempt:
    """An attempt that spent ``ran_s`` seconds running rules (server clock from 100 s)."""
    timing = {"first_arm": 100.0, "ended": 100.0 + ran_s} if ran_s else {}
    return Attempt(**{**timing, **kw})


#: (case, attempt, began, answered by a warm evaluator, answered by a fresh one, carried)
TABLE: list[tuple[str, Attempt, bool, bool, bool, bool]] = [
    ("said nothing, and exited meanwhile (a warm one that retired)",
     att(status=0), False, False, True, False),
    ("said nothing, socket broken", att(garbage="sandbox unreachable: EPIPE"),
     False, False, False, False),
    ("said only its pid", att(pid=42, status=-signal.SIGKILL), False, False, True, False),
    ("missed the hard deadline before a word", att(garbage=HARD_DEADLINE),
     False, True, True, True),
    ("done: no rule matched", att(done=True), True, True, True, True),
    ("died in rule 1", att(armed=(1, RULE_LIMIT), status=ALARM), True, True, True, True),
    ("died in a sweep", att(armed=(0, SWEEP), status=ALARM), True, True, True, True),
    ("a rule raised, then it died", att(errors=[(0, "boom")], status=-signal.SIGSEGV),
     True, True, True, True),
    ("matched", att(matched=2), True, True, True, True),
    ("spent its budget before rule 3", att(budget_at=3), True, True, True, True),
    ("answered a verdicts frame in part", att(items=[("mn", {})]), True, True, True, True),
    ("said something unreadable", att(garbage="unreadable sandbox output: 'zz'"),
     False, False, False, False),
]  # fmt: skip


@pytest.mark.parametrize(
    ("attempt", "began_", "warm", "fresh", "carried_"),
    [t[1:] for t in TABLE],
    ids=[t[0] for t in TABLE],
)
def test_whose_answer_a_failed_attempt_is(
    attempt: Attempt, began_: bool, warm: bool, fresh: bool, carried_: bool
) -> None:
    assert began(attempt) is began_
    assert answered(attempt, fresh=False) is warm
    assert answered(attempt, fresh=True) is fresh
    assert carried(attempt) is carried_


#: (case, attempts tried so far, the rule set goes by rule, the next attempt sweeps)
SWEEPS: list[tuple[str, list[Attempt], bool, bool]] = [
    ("an event's first attempt sweeps", [], False, True),
    ("unless its rule set goes rule by rule", [], True, False),
    ("after a sweep ran out: rule by rule", [att(0.05, armed=(0, SWEEP), status=ALARM)],
     False, False),
    ("after a timeout: rule by rule", [att(0.05, armed=(1, RULE_LIMIT), status=ALARM)],
     False, False),
]  # fmt: skip


@pytest.mark.parametrize(
    ("tried", "by_rule", "expected"), [t[1:] for t in SWEEPS], ids=[t[0] for t in SWEEPS]
)
def test_only_a_first_attempt_sweeps(tried: list[Attempt], by_rule: bool, expected: bool) -> None:
    assert sweeps(tried, by_rule=by_rule) is expected


#: (case, attempts tried so far, seconds the deadline moves on by)
SWEPT: list[tuple[str, list[Attempt], float]] = [
    ("nothing tried", [], 0.0),
    ("a sweep that ran out: its time", [att(0.05, armed=(0, SWEEP), status=ALARM)], 0.05),
    ("a sweep that crashed: its time too", [att(0.02, armed=(0, SWEEP), status=-6)], 0.02),
    ("a timeout costs the event its time", [att(0.05, armed=(1, RULE_LIMIT), status=ALARM)],
     0.0),
    ("a sweep that answered garbage is no sweep that ran out",
     [att(0.05, armed=(0, SWEEP), garbage="evaluation ended early")], 0.0),
    ("only the sweep's share",
     [att(0.05, armed=(0, SWEEP), status=ALARM), att(0.03, armed=(2, RULE_LIMIT), status=ALARM)],
     0.05),
]  # fmt: skip


@pytest.mark.parametrize(("tried", "expected"), [t[1:] for t in SWEPT], ids=[t[0] for t in SWEPT])
def test_sweeps_that_ran_out_move_the_deadline(tried: list[Attempt], expected: float) -> None:
    assert swept_s(tried) == pytest.approx(expected)
