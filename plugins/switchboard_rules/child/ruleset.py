"""A rule set compiled in its zygote, after forked trials proved it safe and small enough."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from .. import protocol as wire
from ..jqscan import balanced
from .program import build_program, compile_program
from .usererror import in_rule_terms, unbalanced_in_rule_terms

LIMIT_MSG = "compilation exceeded the sandbox's memory or time limit"
DEADLINE_MSG = "compilation exceeded the sandbox's time limit (the rule set's compile_ms)"
_PAGE = os.sysconf("SC_PAGE_SIZE")


#: The most of libjq's own message a trial passes back (its caller makes it one's own).
RAW_MAX = 4000


def _clean(msg: str) -> str:
    lines = [ln for ln in msg.splitlines() if ln.strip()]
    return " ".join(lines[:2])[:500] if lines else "compile error"


def resident() -> int:
    """This process's resident set size, in bytes (one small read: cheap enough per evaluation)."""
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * _PAGE


def too_large(size: int, limit: int, what: str = "the compiled rule") -> str:
    return (
        f"{what} takes {size / 2**20:.1f} MiB, over the sandbox's limit of "
        f"{limit / 2**20:.0f} MiB ([plugins.rules] ruleset_mib)"
    )


def trial(program: str, params: dict[str, Any], seconds: float) -> tuple[str | None, int]:
    """Compile ``program`` in a forked child under the limits, for at most ``seconds``.

    ``(None, bytes the compiled program added)`` when it compiles, else ``(why not, 0)``.
    """
    if seconds <= 0.001:
        return DEADLINE_MSG, 0
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        try:  # a forked child never returns into its parent's code, whatever happens
            os.close(r)
            signal.setitimer(signal.ITIMER_REAL, seconds)
            try:
                before = resident()
                compiled = compile_program(program, params)  # held: freed, it would measure nothing
                out = wire.encode_trial(None, max(resident() - before, 0))
                del compiled
            except Exception as exc:  # noqa: BLE001 - any compile failure is reported
                out = wire.encode_trial(str(exc)[:RAW_MAX])  # cleaned by the caller
            os.write(w, out)
        finally:
            os._exit(0)
    os.close(w)
    chunks = []
    while chunk := os.read(r, 4096):
        chunks.append(chunk)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    try:
        return wire.decode_trial(b"".join(chunks))
    except ValueError:  # killed by its alarm or its memory cap before it answered
        pass
    code = os.waitstatus_to_exitcode(status)
    if code == -signal.SIGALRM:
        return DEADLINE_MSG, 0
    how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit {code}"
    return f"{LIMIT_MSG} ({how})", 0


class RuleSet:
    """A compiled rule set: the program over the rules that compile, and the others' errors.

    Every trial shares one deadline (``compile_ms`` for the whole set): a set of rules that
    each take most of it costs one ``compile_ms``, not one per rule. A set whose compiled
    form would add more than ``ruleset_bytes`` to the zygote is refused like a compile
    error, naming the limit, so a cached zygote can never hold a memory bomb.
    """

    def __init__(self, exprs: list[str], params: dict[str, Any], cfg: wire.ChildConfig) -> None:
        deadline = time.monotonic() + cfg.compile_ms / 1000
        limit = cfg.ruleset_bytes

        def attempt(indices: list[int]) -> tuple[str | None, int]:
            return trial(
                build_program(exprs, indices, sweep=True), params, deadline - time.monotonic()
            )

        self.errors: dict[int, str] = {}
        for i, expr in enumerate(exprs):
            if not balanced(expr):
                self.errors[i] = unbalanced_in_rule_terms(expr)
        good = [i for i in range(len(exprs)) if i not in self.errors]
        err, size = attempt(good) if good else (None, 0)
        if good and (err is not None or size > limit):
            for i in good:  # which rules: each alone, in what is left of the deadline
                err, size = attempt([i])
                if err is not None:
                    # alone, the rule stands at a known place: told in its own lines
                    self.errors[i] = in_rule_terms(err, exprs[i]) or _clean(err)
                elif size > limit:
                    self.errors[i] = too_large(size, limit)
            rest = [i for i in good if i not in self.errors]
            err, size = attempt(rest) if rest else (None, 0)
            if err is not None or size > limit:
                why = (
                    f"{_clean(err)} (the rule set as a whole)"
                    if err
                    else too_large(size, limit, "the compiled rule set as a whole")
                )
                for i in rest:
                    self.errors[i] = why
            good = [i for i in good if i not in self.errors]
        self.good = good
        self.good_set = frozenset(good)
        self.exprs, self.params, self.compile_s = exprs, params, cfg.compile_ms / 1000
        # proven safe by a trial under identical limits, so this cannot take the zygote down.
        # The sweep's program: every delivery's (the rule-by-rule one is made on demand)
        self.program = (
            compile_program(build_program(exprs, good, sweep=True), params) if good else None
        )
        self._parts: dict[tuple[int, int], Any] = {}

    def program_for(self, start: int, stop: int) -> Any:
        """The rule-by-rule program over the good rules in ``[start, stop)`` (None: none).

        What an evaluation runs when it does not sweep: going on after a fault, one rule
        alone, every rule's verdict (history), a rule set whose sweep ran out of time. It
        is compiled here once per range and evaluator, from the same rules as the sweep's
        program a trial proved (the same wrapper, but for what it emits), so within the
        same limits; and under the set's compile deadline, as the trials were.
        """
        good = self.good
        if good and start <= good[0] and stop > good[-1]:
            key = (good[0], good[-1] + 1)  # all of them: every history envelope's case
        else:
            todo = [i for i in good if start <= i < stop]
            if not todo:
                return None
            key = (todo[0], todo[-1] + 1)
        found = self._parts.get(key)
        if found is None:
            if len(self._parts) >= 4:  # a few at most: each holds a compiled copy of libjq's
                self._parts.clear()  # builtins, and the evaluator's growth retires it
            # under the set's compile deadline, as its trials were (past it: SIGALRM ends
            # this evaluator with no rule armed, a sandbox failure)
            signal.setitimer(signal.ITIMER_REAL, self.compile_s)
            try:
                found = compile_program(
                    build_program(self.exprs, self.good, start=key[0], stop=key[1]), self.params
                )
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            self._parts[key] = found
        return found

    def error_lines(self) -> list[str]:
        return [wire.CompileError(i, m).encode() for i, m in sorted(self.errors.items())]
