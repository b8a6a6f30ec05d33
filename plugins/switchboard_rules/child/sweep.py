"""A sweep: every rule of a rule set on one envelope in one go, under one alarm."""

from __future__ import annotations

import mmap
import signal

from .. import protocol as wire
from .ruleset import RuleSet


def sweep_match(  # pragma: no cover - child
    header: wire.EvalHeader,
    env: bytes,
    rules: RuleSet,
    cfg: wire.ChildConfig,
    progress: mmap.mmap,
) -> tuple[str, int | None]:
    """``evaluate_match`` as a sweep: every rule in one go, under one alarm.

    The alarm is one rule's limit (a test's ``sweep_ms`` when set), with the parse
    allowance, and never past the budget: a sweep that ends within it kept every rule within
    its own, and one that does not dies armed for a sweep (:data:`.protocol.SWEEP`, no rule
    named), and the server goes rule by rule instead. jq emits only what decides
    (:func:`.program.build_program`): nothing for a delivery that matches no rule, so its
    rules cost one output and two alarms.

    Returns the answer to send (its caller sends it) and the exit code, if this process
    must end.
    """
    head = "".join(rules.error_lines())
    program = rules.program
    if program is None:
        return head + "d\n", None
    good = rules.good_set
    parse = len(env) * cfg.parse_s_per_byte
    limit = min(cfg.sweep_ms or cfg.rule_ms, header.budget_ms) / 1000 + parse
    error_v = wire.JQ_ERROR
    end, code = "d\n", 0
    lines = []
    # name it, then arm: an alarm that fires however soon (a 1 ms sweep_ms, this process held
    # by a busy machine right after arming) finds the sweep named, never an evaluator that
    # died running nothing (a sandbox_failure and no match)
    wire.pack_progress(progress, 0, rules.good[0], wire.SWEEP.encode(), b"0")
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        for out in program.input_text((b"[0,%s]" % env).decode("utf-8")):
            if type(out) is int and out in good:  # the first match: nothing after it runs
                end = wire.Matched(out).encode() + end
                break
            if (
                type(out) is list
                and len(out) == 2
                and type(out[0]) is int
                and out[0] in good
                and type(out[1]) is str
                and out[1].startswith(error_v)
            ):
                lines.append(wire.RuleError(out[0], out[1][len(error_v) :]).encode())
                continue
            end, code = wire.Garbage("unexpected output from the rules").encode(), 3
            break
    except Exception as exc:  # noqa: BLE001 - e.g. the envelope did not parse
        end, code = wire.Garbage(str(exc)[:300]).encode(), 3
    signal.setitimer(signal.ITIMER_REAL, 0)
    wire.finish_progress(progress)
    return head + "".join(lines) + end, code or None
