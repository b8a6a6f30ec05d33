"""An evaluator: one frame in, its envelopes' verdicts out, rule by rule under their alarms."""

from __future__ import annotations

import mmap
import os
import resource
import signal
import socket
import time
from typing import Any, NoReturn

from .. import protocol as wire
from .ruleset import RuleSet
from .sweep import sweep_match


def _send(fd: int, text: str) -> None:
    data = text.encode("utf-8", "replace")
    while data:
        data = data[os.write(fd, data) :]


def evaluate_one(  # pragma: no cover - child
    fd: int, data: bytes, rules: RuleSet, cfg: wire.ChildConfig, progress: mmap.mmap
) -> int | None:
    """Evaluate one envelope and send its answer; an exit code when this process must end.

    The answer is one message at the end: the rule being evaluated lives in the shared
    ``progress`` page, from which the zygote reports the culprit if a per-rule alarm (or a
    crash) kills this process. Errors are sent at once, so a later death cannot lose them.
    This is the hot path of every routed delivery: no per-rule allocation beyond jq's.
    """
    header, env = wire.decode_eval(data)
    if header.mode == wire.MODE_VERDICTS:
        return evaluate_verdicts(fd, header, env, rules, cfg, progress)
    if header.mode == wire.MODE_MANY:
        # each envelope in turn, answered (and so safe from a later death) before the next
        for one in env.split(b"\n"):
            code = evaluate_match(fd, header, one, rules, cfg, progress)
            if code is not None:
                return code
        return None
    return evaluate_match(fd, header, env, rules, cfg, progress)


def evaluate_match(  # pragma: no cover - child
    fd: int,
    header: wire.EvalHeader,
    env: bytes,
    rules: RuleSet,
    cfg: wire.ChildConfig,
    progress: mmap.mmap,
) -> int | None:
    """:func:`evaluate_one` for one envelope in match mode: its answer ends with ``d``."""
    start = header.start
    if header.sweep and start == 0:
        answer, swept = sweep_match(header, env, rules, cfg, progress)
        _send(fd, answer)
        return swept
    todo = [i for i in rules.good if i >= start]
    # before the budget's clock starts: going on after a fault compiles the rest first
    program = rules.program_for(start, len(rules.exprs)) if todo else None
    parse = len(env) * cfg.parse_s_per_byte
    deadline = time.monotonic() + header.budget_ms / 1000 + parse
    head = "".join(rules.error_lines())
    if not todo or program is None:
        _send(fd, head + "d\n")
        return None
    rule_s = cfg.rule_ms / 1000
    setitimer, monotonic, pack = signal.setitimer, time.monotonic, wire.pack_progress
    timer = signal.ITIMER_REAL
    rule_limit, budget_limit = wire.RULE_LIMIT.encode(), wire.BUDGET_LIMIT.encode()
    error_v = wire.JQ_ERROR
    end, code = "d\n", 0
    results: Any = None
    try:
        for k, i in enumerate(todo):
            left = deadline - monotonic()
            if left <= 0.001:
                setitimer(timer, 0)
                end = wire.BudgetSpent(i).encode() + end
                break
            limit = rule_s + parse if k == 0 else rule_s  # the first rule also parses
            how = rule_limit if limit <= left else budget_limit
            if k:
                # re-arming replaces the last rule's alarm, so the hot path never disarms
                # (one syscall a rule, not two); arm, then name the rule, so an alarm that
                # fires in between names the rule whose time it measured
                setitimer(timer, limit if limit <= left else left)
                pack(progress, 0, i, how, b"0")
            else:
                # no alarm is pending yet: name the rule, then arm, so that however long
                # this process is held in between, its alarm finds a rule named
                pack(progress, 0, i, how, b"0")
                setitimer(timer, limit if limit <= left else left)
            if results is None:
                results = iter(program.input_text((b"[%d,%s]" % (start, env)).decode("utf-8")))
            verdict = next(results)
            if verdict is False or verdict is None:
                continue
            setitimer(timer, 0)
            if verdict is True:
                end = wire.Matched(i).encode() + end
                break
            if isinstance(verdict, str) and verdict.startswith(error_v):
                _send(fd, head + wire.RuleError(i, verdict[len(error_v) :]).encode())
                head = ""
                continue
            end, code = wire.Garbage(f"unexpected output from rule {i}").encode(), 3
            break
    except StopIteration:
        end, code = wire.Garbage("evaluation ended early").encode(), 3
    except Exception as exc:  # noqa: BLE001 - e.g. the envelope did not parse
        end, code = wire.Garbage(str(exc)[:300]).encode(), 3
    setitimer(timer, 0)
    wire.finish_progress(progress)
    _send(fd, head + end)
    return code or None


def evaluate_verdicts(  # pragma: no cover - child
    fd: int,
    header: wire.EvalHeader,
    data: bytes,
    rules: RuleSet,
    cfg: wire.ChildConfig,
    progress: mmap.mmap,
) -> int | None:
    """Every rule's verdict on each envelope of a verdicts frame, one ``v`` line each.

    The same program, alarms and budget as :func:`evaluate_one`, per envelope; a rule that
    runs past its alarm kills this process (the zygote names it, the server goes on from
    there). Lines are written per envelope, so a death never loses the envelopes before.
    """
    n = len(rules.errors) + len(rules.good)
    good = set(rules.good)
    compile_chars = {i: wire.VERDICT_COMPILE for i in rules.errors}
    head = "".join(rules.error_lines())
    rule_s = cfg.rule_ms / 1000
    setitimer, monotonic, pack = signal.setitimer, time.monotonic, wire.pack_progress
    timer = signal.ITIMER_REAL
    rule_limit, budget_limit = wire.RULE_LIMIT.encode(), wire.BUDGET_LIMIT.encode()
    error_v = wire.JQ_ERROR
    only = header.only
    code = 0
    out: list[str] = []
    for k, env in enumerate(data.split(b"\n") if data else []):
        start = header.start if k == 0 else 0
        stop = n if only is None else min(only + 1, n)
        # before the budget's clock starts (going on after a fault compiles the rest first)
        program = rules.program_for(start, stop)
        parse = len(env) * cfg.parse_s_per_byte
        deadline = monotonic() + header.budget_ms / 1000 + parse
        chars: list[str] = []
        results: Any = None
        first = True
        try:
            for i in range(start, stop):
                if i not in good:
                    chars.append(compile_chars.get(i, wire.VERDICT_SKIPPED))
                    continue
                left = deadline - monotonic()
                if left <= 0.001:
                    chars.append(wire.VERDICT_BUDGET)
                    continue
                limit = rule_s + parse if first else rule_s
                how = rule_limit if limit <= left else budget_limit
                if first:  # no alarm pending: name, then arm (as evaluate_match does)
                    pack(progress, 0, i, how, b"0")
                    setitimer(timer, limit if limit <= left else left)
                    first = False
                else:  # re-arming: arm, then name, so the last rule's alarm still names it
                    setitimer(timer, limit if limit <= left else left)
                    pack(progress, 0, i, how, b"0")
                if results is None:
                    assert program is not None
                    text = (b"[%d,%s]" % (start, env)).decode("utf-8")
                    results = iter(program.input_text(text))
                # no disarming between rules: the next rule's arming replaces this alarm
                # (disarmed once the envelope is done), one system call fewer per rule
                verdict = next(results)
                if verdict is False:
                    chars.append(wire.VERDICT_FALSE)
                elif verdict is True:
                    chars.append(wire.VERDICT_MATCH)
                elif verdict is None:
                    chars.append(wire.VERDICT_NULL)
                elif isinstance(verdict, str) and verdict.startswith(error_v):
                    out.append(wire.RuleError(i, verdict[len(error_v) :]).encode())
                    chars.append(wire.VERDICT_ERROR)
                else:
                    out.append(wire.Garbage(f"unexpected output from rule {i}").encode())
                    code = 3
                    break
        except StopIteration:
            out.append(wire.Garbage("evaluation ended early").encode())
            code = 3
        except Exception as exc:  # noqa: BLE001 - e.g. the envelope did not parse
            out.append(wire.Garbage(str(exc)[:300]).encode())
            code = 3
        setitimer(timer, 0)
        wire.finish_progress(progress)
        if code:
            break
        out.append(wire.Verdicts(k, "".join(chars)).encode())
        _send(fd, head + "".join(out))
        head, out = "", []
    _send(fd, head + "".join(out) + ("" if code else "d\n"))
    return code or None


def evaluator(
    fd: int, rules: RuleSet, cfg: wire.ChildConfig, progress: mmap.mmap
) -> NoReturn:  # pragma: no cover - child
    """Say its pid, then serve evaluations on ``fd`` until it closes, and exit.

    Retires (exits after answering) once it grew by more than ``retire_bytes`` since it
    started: what one envelope or one rule left behind never accumulates. Anything
    stranger than a verdict (garbage, an envelope that did not parse) also ends it.
    """
    sock = socket.socket(fileno=fd)
    _send(fd, wire.Pid(os.getpid()).encode())
    # the high-water mark (one syscall, no file to read): growth that came and went still
    # counts, since the pages it left behind are what the tree's budget pays for
    base = _peak_kib()
    while True:
        try:
            data = wire.read_frame(sock)
        except (EOFError, OSError):
            os._exit(0)
        code = evaluate_one(fd, data, rules, cfg, progress)
        if code is not None:
            os._exit(code)
        if (_peak_kib() - base) * 1024 > cfg.retire_bytes:
            os._exit(0)


def _peak_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
