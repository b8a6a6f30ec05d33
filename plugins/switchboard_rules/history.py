"""History's verdicts: every rule's verdict on many envelopes, in frames to a warm evaluator."""

from __future__ import annotations

import signal
from collections.abc import Sequence

from switchboard.plugin import RuleVerdict

from . import protocol as proto
from .policy import Attempt, describe
from .scheduler import Scheduler


async def verdicts(
    scheduler: Scheduler,
    key: str,
    spec: bytes,
    envelopes: Sequence[bytes],
    n: int,
    budget: float,
) -> list[list[RuleVerdict]]:
    """Each of the ``n`` rules' verdicts on each envelope, ``budget`` ms per envelope.

    Many envelopes go to one warm evaluator in one frame. An envelope that kills its
    evaluator is evaluated again one rule at a time, so the rule that timed out or crashed
    is named and the others still have a verdict; the frame goes on after it.
    """
    out: list[list[RuleVerdict]] = []
    k = 0
    while k < len(envelopes):
        batch = envelopes[k:]
        att = await _verdict_attempt(scheduler, key, spec, batch, budget, 0, None)
        for chars, errors in att.items:
            out.append(_verdicts_of(chars, errors, att.compile_errors, 0, budget))
        k += len(att.items)
        if k < len(envelopes) and not att.done:
            # the envelope that ended the evaluator: again, one rule at a time
            out.append(await _one_rule_at_a_time(scheduler, key, spec, envelopes[k], n, budget))
            k += 1
        elif k < len(envelopes):  # done but short: never expected; do not spin
            out.extend([_failed("sandbox answered short")] * n for _ in envelopes[k:])
            k = len(envelopes)
    return out


async def _verdict_attempt(
    scheduler: Scheduler,
    key: str,
    spec: bytes,
    batch: Sequence[bytes],
    budget_ms: float,
    start: int,
    only: int | None,
) -> Attempt:
    """One frame of ``batch`` in verdicts mode, from rule ``start`` (to ``only``, if set)."""
    header = proto.EvalHeader(start, budget_ms, proto.MODE_VERDICTS, only)
    return (await scheduler.frame(key, spec, batch, header))[0]


async def _one_rule_at_a_time(
    scheduler: Scheduler, key: str, spec: bytes, envelope: bytes, n: int, budget_ms: float
) -> list[RuleVerdict]:
    """Every rule's verdict on ``envelope``, each rule in a frame of its own."""
    out: list[RuleVerdict] = []
    spent = 0.0
    for i in range(n):
        left = budget_ms - spent * 1000
        if left <= 1:
            out.append(
                RuleVerdict(
                    "error",
                    "budget_exhausted",
                    "the event's budget was"
                    f" spent before this rule ({scheduler.limits.event_ms} ms)",
                )
            )
            continue
        att = await _verdict_attempt(scheduler, key, spec, [envelope], left, i, i)
        spent += att.ran_s
        if att.items:
            chars, errors = att.items[0]
            out.extend(_verdicts_of(chars, errors, att.compile_errors, i, budget_ms)[:1])
            continue
        if att.armed is not None and att.status == -signal.SIGALRM:
            if att.armed[1] == proto.BUDGET_LIMIT:
                out.append(
                    RuleVerdict(
                        "error",
                        "budget_exhausted",
                        "the event's budget ran out during this rule",
                    )
                )
            else:
                out.append(
                    RuleVerdict("error", "timeout", f"rule exceeded {scheduler.limits.rule_ms} ms")
                )
        elif att.armed is not None:
            out.append(RuleVerdict("error", "sandbox_failure", describe(att.status)))
        else:
            out.append(_failed(att.garbage or describe(att.status)))
    return out


#: The verdicts without a message, shared (an envelope has one per rule, a diff thousands).
PLAIN = {
    proto.VERDICT_MATCH: RuleVerdict("matched"),
    proto.VERDICT_FALSE: RuleVerdict("false"),
    proto.VERDICT_NULL: RuleVerdict("null"),
}


def _failed(detail: str) -> RuleVerdict:
    return RuleVerdict("error", "sandbox_failure", detail)


def _verdicts_of(
    chars: str,
    errors: dict[int, str],
    compile_errors: dict[int, str],
    start: int,
    budget_ms: float,
) -> list[RuleVerdict]:
    """One envelope's ``v`` line (rule ``start`` on) as :class:`RuleVerdict`s."""
    out: list[RuleVerdict] = []
    for offset, char in enumerate(chars):
        i = start + offset
        same = PLAIN.get(char)
        if same is not None:
            out.append(same)
        elif char == proto.VERDICT_ERROR:
            out.append(RuleVerdict("error", "error", errors.get(i, "error")))
        elif char == proto.VERDICT_COMPILE:
            out.append(RuleVerdict("error", "compile_error", compile_errors.get(i)))
        elif char == proto.VERDICT_BUDGET:
            out.append(
                RuleVerdict(
                    "error",
                    "budget_exhausted",
                    f"the event's budget ({budget_ms:g} ms) was spent before this rule",
                )
            )
        else:
            out.append(_failed("not evaluated"))
    return out
