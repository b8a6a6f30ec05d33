"""The policy, as a table: what evaluators reported in, a MatchResult (or the next attempt) out."""

from __future__ import annotations

import signal
from typing import Any

import pytest
from switchboard_rules.policy import BUSY, Attempt, Resume, clean, judge
from switchboard_rules.protocol import BUDGET_LIMIT, RULE_LIMIT, SWEEP

from switchboard.plugin import Fault, MatchResult

IDS = ["a", "b", None]
ALARM = -signal.SIGALRM


def att(ran_s: float = 0.0, **kw: Any) -> Attempt:
    """An attempt that spent ``ran_s`` seconds running rules (server clock from 100 s)."""
    timing = {"first_arm": 100.0, "ended": 100.0 + ran_s} if ran_s else {}
    return Attempt(**{**timing, **kw})


def timed_out(index: int, ran_s: float = 0.05) -> Attempt:
    return att(ran_s, armed=(index, RULE_LIMIT), status=ALARM)


TABLE: list[tuple[str, list[str | None], list[Attempt], Any]] = [
    ("no rules", [], [], MatchResult(None)),
    ("nothing tried yet: start at rule 0 with the whole budget", IDS, [], Resume(0, 250)),
    ("first match", IDS, [att(matched=0, done=True)], MatchResult(0)),
    ("errors are skipped, then a match",
     IDS, [att(errors=[(0, "boom")], matched=1)],
     MatchResult(1, (Fault(0, "error", "a", "boom"),))),
    ("no match", IDS, [att(done=True)], MatchResult(None)),
    ("compile errors come first, in rule order",
     IDS, [att(compile_errors={2: "bad", 0: "worse"}, errors=[(1, "boom")], done=True)],
     MatchResult(None, (Fault(0, "compile_error", "a", "worse"),
                        Fault(1, "error", "b", "boom"),
                        Fault(2, "compile_error", None, "bad")))),
    ("the budget was spent before rule 1 began",
     IDS, [att(budget_at=1, done=True)],
     MatchResult(None, (Fault(1, "budget_exhausted", "b"),))),
    ("killed by the budget's alarm while running rule 1",
     IDS, [att(armed=(1, BUDGET_LIMIT), status=ALARM)],
     MatchResult(None, (Fault(1, "budget_exhausted", "b"),))),
    ("a timeout resumes after the rule with what is left",
     IDS, [timed_out(0, 0.05)], Resume(1, pytest.approx(200))),
    ("timeout, then a match in the next evaluator",
     IDS, [timed_out(0), att(matched=2)],
     MatchResult(2, (Fault(0, "timeout", "a", "rule exceeded 50 ms"),))),
    ("timeouts add up across attempts",
     IDS, [timed_out(0, 0.1), timed_out(1, 0.1)], Resume(2, pytest.approx(50))),
    ("a timeout on the last rule ends it",
     IDS, [timed_out(2)],
     MatchResult(None, (Fault(2, "timeout", None, "rule exceeded 50 ms"),))),
    ("a timeout that leaves no budget: the next rule is where it ran out",
     IDS, [timed_out(0, 0.25)],
     MatchResult(None, (Fault(0, "timeout", "a", "rule exceeded 50 ms"),
                        Fault(1, "budget_exhausted", "b")))),
    ("compile errors reported by an earlier attempt are kept (once)",
     IDS, [att(0.05, compile_errors={1: "bad"}, armed=(0, RULE_LIMIT), status=ALARM),
           att(compile_errors={1: "bad"}, done=True)],
     MatchResult(None, (Fault(0, "timeout", "a", "rule exceeded 50 ms"),
                        Fault(1, "compile_error", "b", "bad")))),
    ("garbage is a sandbox failure, after the faults found so far",
     IDS, [att(errors=[(0, "boom")], garbage="evaluation ended early", status=3)],
     MatchResult(None, (Fault(0, "error", "a", "boom"),
                        Fault(-1, "sandbox_failure", detail="evaluation ended early")))),
    ("killed by another signal mid-rule (the memory cap): that rule's fault, then go on",
     IDS, [att(0.01, armed=(0, RULE_LIMIT), status=-signal.SIGKILL)],
     Resume(1, pytest.approx(240))),
    ("a crash names its rule, and the rules after it still run",
     IDS, [att(0.01, armed=(1, RULE_LIMIT), status=-signal.SIGABRT), att(matched=2)],
     MatchResult(2, (Fault(1, "sandbox_failure", "b", "evaluation process killed by "
                           "SIGABRT (memory cap, crash or abort)"),))),
    ("a crash under the budget's limit is still the rule's crash",
     IDS, [att(0.01, armed=(0, BUDGET_LIMIT), status=-signal.SIGSEGV), att(done=True)],
     MatchResult(None, (Fault(0, "sandbox_failure", "a", "evaluation process killed by "
                              "SIGSEGV (memory cap, crash or abort)"),))),
    ("a crash in the last rule ends it",
     IDS, [att(armed=(2, RULE_LIMIT), status=-signal.SIGKILL)],
     MatchResult(None, (Fault(2, "sandbox_failure", None, "evaluation process killed by "
                              "SIGKILL (memory cap, crash or abort)"),))),
    ("a crash that leaves no budget: the next rule is where it ran out",
     IDS, [att(0.25, armed=(0, RULE_LIMIT), status=3)],
     MatchResult(None, (Fault(0, "sandbox_failure", "a",
                              "evaluation process exited with status 3"),
                        Fault(1, "budget_exhausted", "b")))),
    ("exited with a status",
     IDS, [att(status=3)],
     MatchResult(None, (Fault(-1, "sandbox_failure",
                              detail="evaluation process exited with status 3"),))),
    ("the socket closed without an answer",
     IDS, [att()],
     MatchResult(None, (Fault(-1, "sandbox_failure",
                              detail="sandbox process exited without an answer"),))),
    ("an alarm with no rule armed is no timeout",
     IDS, [att(status=ALARM)],
     MatchResult(None, (Fault(-1, "sandbox_failure",
                              detail="evaluation process killed by SIGALRM (memory cap, "
                                     "crash or abort)"),))),
    ("an unknown signal number",
     IDS, [att(status=-99)],
     MatchResult(None, (Fault(-1, "sandbox_failure", detail="evaluation process killed by 99 "
                              "(memory cap, crash or abort)"),))),
    ("a match wins over a garbage line that came after it",
     IDS, [att(matched=0, garbage="late")], MatchResult(0)),
    ("a sweep that ran out names no rule and costs the event nothing: go rule by rule",
     IDS, [att(0.05, armed=(0, SWEEP), status=ALARM)], Resume(0, 250)),
    ("a sweep that crashed: the same (the rule by rule attempt names the culprit)",
     IDS, [att(0.01, armed=(0, SWEEP), status=-signal.SIGKILL)], Resume(0, 250)),
    ("a sweep begins at the first rule that compiled",
     IDS, [att(0.05, compile_errors={0: "bad"}, armed=(1, SWEEP), status=ALARM)],
     Resume(1, 250)),
    ("after a sweep that ran out, the rule by rule attempt decides",
     IDS, [att(0.05, armed=(0, SWEEP), status=ALARM), timed_out(1, 0.05), att(matched=2)],
     MatchResult(2, (Fault(1, "timeout", "b", "rule exceeded 50 ms"),))),
    ("... with the whole budget: only its own attempts spend it",
     IDS, [att(0.05, armed=(0, SWEEP), status=ALARM), timed_out(0, 0.1), timed_out(1, 0.1)],
     Resume(2, pytest.approx(50))),
    ("a sweep past the server's hard deadline is the sandbox's failure",
     IDS, [att(armed=(0, SWEEP), garbage="sandbox missed its hard deadline")],
     MatchResult(None, (Fault(-1, "sandbox_failure",
                              detail="sandbox missed its hard deadline"),))),
]  # fmt: skip


@pytest.mark.parametrize(
    ("ids", "attempts", "expected"), [t[1:] for t in TABLE], ids=[t[0] for t in TABLE]
)
def test_judge(ids: list[str | None], attempts: list[Attempt], expected: Any) -> None:
    assert judge(ids, attempts, rule_ms=50, event_ms=250) == expected


@pytest.mark.parametrize(
    ("ids", "attempts", "expected"),
    [t[1:] for t in TABLE if len(t[2]) == 1],
    ids=[t[0] for t in TABLE if len(t[2]) == 1],
)
def test_a_clean_answer_is_what_judge_makes_of_it(
    ids: list[str | None], attempts: list[Attempt], expected: Any
) -> None:
    """The hot path's shortcut (an attempt that ended with no fault) never answers
    otherwise than the policy: it answers as judge does, or leaves it to judge."""
    answer = clean(attempts[0])
    assert answer is None or answer == expected == judge(ids, attempts, rule_ms=50, event_ms=250)


def test_clean_answers_the_common_cases_and_nothing_faulted() -> None:
    assert clean(att(done=True)) == MatchResult(None)
    assert clean(att(matched=2, done=True)) == MatchResult(2)
    for faulted in (
        att(matched=1, done=True, errors=[(0, "boom")]),
        att(done=True, compile_errors={0: "bad"}),
        att(done=True, budget_at=1),
        att(matched=0, garbage="late"),
        att(done=True, status=3),
        att(armed=(0, SWEEP), status=ALARM),
        att(matched=0),  # no done line yet
    ):
        assert clean(faulted) is None, faulted


def test_no_slot_is_busy() -> None:
    assert judge(IDS, [], rule_ms=50, event_ms=250, slot=False) == BUSY
    assert BUSY == MatchResult(None, (Fault(-1, "sandbox_busy"),))


def test_judge_is_pure() -> None:
    attempts = [timed_out(0), att(errors=[(1, "x")], matched=2)]
    first = judge(IDS, attempts, rule_ms=50, event_ms=250)
    assert judge(IDS, attempts, rule_ms=50, event_ms=250) == first
    assert attempts == [timed_out(0), att(errors=[(1, "x")], matched=2)]


def test_ran_s() -> None:
    assert att().ran_s == 0.0
    assert att(0.125).ran_s == pytest.approx(0.125)
    assert Attempt(first_arm=5.0).ran_s == 0.0  # still running: no end yet
