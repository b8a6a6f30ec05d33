"""What the evaluators reported, judged: a :class:`MatchResult`, or where to go on (pure).

The sandbox (:mod:`.sandbox`) runs evaluators, and :mod:`.wire` folds each one's report
lines (:mod:`.protocol`) into an :class:`Attempt`; :func:`judge` alone decides what those attempts
mean. A rule that times out costs its evaluator, so an evaluation may take several
attempts: each resumes after the rule that timed out, with what is left of the budget. A
first attempt that swept every rule under one alarm and did not finish (``SWEEP``) is no
fault and spends nothing: the next attempt goes rule by rule from its start.

Faults, by cause: ``compile_error`` (a rule that does not compile is skipped), ``error`` (a
rule raised: skipped), ``timeout`` (a rule ran past ``rule_ms``: skipped, the next attempt
starts after it), ``budget_exhausted`` (the event's ``event_ms`` ran out before that rule:
no match), ``sandbox_failure`` (an evaluator died inside a rule: that rule is named and skipped, the
next attempt starts after it; or it died outside any rule or said something unreadable: no
match, ``rule_index`` -1) and ``sandbox_busy`` (no slot came free in time: no match, -1).
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from dataclasses import dataclass, field

from switchboard.plugin import Fault, MatchResult

from .protocol import BUDGET_LIMIT, SWEEP


@dataclass
class Attempt:
    """What one evaluator process reported before it finished or died."""

    pid: int | None = None
    compile_errors: dict[int, str] = field(default_factory=dict)
    errors: list[tuple[int, str]] = field(default_factory=list)
    matched: int | None = None
    #: The rule running when the last line came (index, RULE_LIMIT or BUDGET_LIMIT).
    armed: tuple[int, str] | None = None
    #: When the first rule was armed, and when the attempt ended (the server's clock, s).
    first_arm: float | None = None
    ended: float | None = None
    budget_at: int | None = None
    done: bool = False
    #: The evaluator's exit code, or minus the signal that ended it.
    status: int | None = None
    garbage: str | None = None
    #: (verdicts mode) each finished envelope's verdict characters and its rules' errors
    items: list[tuple[str, dict[int, str]]] = field(default_factory=list)

    @property
    def ran_s(self) -> float:
        """Seconds the attempt spent running rules (0 when none was armed)."""
        if not self.first_arm or self.ended is None:
            return 0.0
        return self.ended - self.first_arm


@dataclass(frozen=True)
class Resume:
    """Not decided yet: run an evaluator from rule ``start`` with ``budget_ms`` left."""

    start: int
    budget_ms: float


BUSY = MatchResult(None, (Fault(-1, "sandbox_busy"),))


def clean(att: Attempt) -> MatchResult | None:
    """The answer of an attempt that ended without a fault (no error, no compile error, no
    budget spent: most of them), else None (:func:`judge` it). What :func:`judge` makes of
    that attempt alone, in fewer steps."""
    if (
        att.done
        and att.status is None
        and att.garbage is None
        and att.budget_at is None
        and not att.errors
        and not att.compile_errors
    ):
        return MatchResult(att.matched)
    return None


def swept_out(att: Attempt) -> bool:
    """Whether ``att`` is a sweep that died before answering (its alarm, or a crash)."""
    return att.armed is not None and att.armed[1] == SWEEP and not att.done and att.garbage is None


def describe(status: int | None) -> str:
    """Why an evaluator that gave no answer ended, for a ``sandbox_failure``'s detail."""
    if status is None:
        return "sandbox process exited without an answer"
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = str(-status)
        return f"evaluation process killed by {name} (memory cap, crash or abort)"
    return f"evaluation process exited with status {status}"


def judge(
    ids: Sequence[str | None],
    attempts: Sequence[Attempt],
    *,
    rule_ms: int,
    event_ms: int,
    slot: bool = True,
) -> MatchResult | Resume:
    """The first matching rule and the faults met on the way, or the next attempt to make.

    :param ids: each rule's id, in order (the faults carry them).
    :param attempts: every attempt made so far for this event, in order.
    :param rule_ms: one rule's limit (named in a timeout's detail).
    :param event_ms: the event's budget across all its attempts.
    :param slot: False when no evaluation slot came free: the sandbox is busy.
    """
    if not ids:
        return MatchResult(None)
    if not slot:
        return BUSY
    if not attempts:  # every delivery's first question: from rule 0, with the whole budget
        return Resume(0, event_ms)
    compile_errors: dict[int, str] = {}
    faults: list[Fault] = []

    def result(index: int | None, *extra: Fault) -> MatchResult:
        found = [Fault(i, "compile_error", ids[i], m) for i, m in compile_errors.items()]
        found += faults
        found.sort(key=lambda f: f.rule_index)
        return MatchResult(index, tuple(found) + extra)

    start, spent = 0, 0.0
    for att in attempts:
        if swept_out(att):
            # died in a sweep (its alarm or a crash) before answering: it named no rule and
            # its time is not the event's; the next attempt goes rule by rule from its start
            assert att.armed is not None
            start = att.armed[0]
            continue
        compile_errors.update(att.compile_errors)
        faults.extend(Fault(i, "error", ids[i], m) for i, m in att.errors)
        if att.matched is not None:
            return result(att.matched)
        if att.budget_at is not None:
            faults.append(Fault(att.budget_at, "budget_exhausted", ids[att.budget_at]))
            return result(None)
        if att.done:
            return result(None)
        if att.garbage is not None or att.armed is None:
            # gave no answer and was running no rule: nothing to blame but the sandbox
            detail = att.garbage or describe(att.status)
            return result(None, Fault(-1, "sandbox_failure", detail=detail))
        index, how = att.armed
        if att.status != -signal.SIGALRM:
            # died inside rule ``index`` (its memory cap, a crash in libjq): that rule's fault,
            # and the rules after it still run, as after a timeout
            faults.append(Fault(index, "sandbox_failure", ids[index], describe(att.status)))
        elif how == BUDGET_LIMIT:
            faults.append(Fault(index, "budget_exhausted", ids[index]))
            return result(None)
        else:
            faults.append(Fault(index, "timeout", ids[index], f"rule exceeded {rule_ms} ms"))
        spent += att.ran_s
        start = index + 1
        if start < len(ids) and spent * 1000 >= event_ms - 1:
            faults.append(Fault(start, "budget_exhausted", ids[start]))
            return result(None)
    if start < len(ids):
        return Resume(start, max(event_ms - spent * 1000, 0))
    return result(None)
