"""The sandbox's fork server and zygotes: the only processes that ever run tenant jq.

Process tree (one process group, the fork server is a child subreaper)::

    fork server   imports jq, forks one zygote per rule set and webhook (LRU, and evicted
                  while the tree's memory is over its budget), never runs tenant jq
    └── zygote    RLIMIT_AS, compiles its rule set once (after proving it safe, and small
                  enough, in forked trials under one deadline)
        └── evaluator, started ahead of need and reused for many evaluations: SIGALRM
            hard stop (the default action: the process dies) for a sweep of all the rules,
            or per rule when going rule by rule; one answer per envelope

Every message these processes exchange with the server, and with each other, is defined
in :mod:`.protocol`. The server starts this module without importing its package (see
``sandbox._BOOTSTRAP``): nothing here may import the host or the plugin's hooks.
"""

from __future__ import annotations

import ctypes
import gc
import json
import mmap
import os
import resource
import select
import signal
import socket
import sys
import time
from collections import OrderedDict
from typing import Any, NoReturn

import jq

from . import protocol as wire
from .jqscan import balanced, shadow_prelude
from .single import single_output

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
LIMIT_MSG = "compilation exceeded the sandbox's memory or time limit"
DEADLINE_MSG = "compilation exceeded the sandbox's time limit (the rule set's compile_ms)"
#: How often the fork server measures its tree's memory while anything changed.
MEASURE_S = 0.5
_PAGE = os.sysconf("SC_PAGE_SIZE")
#: Starts every program built here (trial, zygote and save-time compiles alike): a forbidden
#: builtin the save-time scanner missed raises a rule error instead of running. The arities
#: come from this libjq's own ``builtins``, read once at import.
PRELUDE = shadow_prelude(jq.compile("builtins").input_value(None).first())


try:
    # Resolved once here: every evaluator calls it right after fork, where loading libc
    # through ctypes again would fault in (and copy) pages on the hot path.
    _PRCTL: Any = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # pragma: no cover - non-Linux
    _PRCTL = None


def _prctl(option: int, arg: int) -> None:
    if _PRCTL is not None:
        _PRCTL(option, arg, 0, 0, 0)


def build_program(
    exprs: list[str],
    indices: list[int],
    *,
    exact: bool = False,
    start: int = 0,
    stop: int | None = None,
    sweep: bool = False,
) -> str:
    """One program over ``[start, envelope]`` streaming one verdict per rule.

    A rule's verdict is its first output's truthiness, a null told apart from false for
    "why not": ``true`` for a truthy first output, else that output itself (``false`` or
    ``null``), which needs no comparison and no string (jq time for 32 rules 105 -> 91 us
    against the strings ``"m"``/``"n"``/``"z"``). After the first output ``break`` ends
    the rule (what ``first`` does, without its ``reduce``: 13 % less time for 32 rules); a
    rule with no output reaches the ``false`` after the comma. An error is caught and
    becomes ``e`` + its message, cut to fit a verdict. (``//`` would be shorter, but it
    swallows errors.) So the program emits only ``true``, ``false``, ``null`` and error
    strings: each rule is wrapped whole (its brackets are checked balanced beforehand), and
    the evaluator refuses any other output as garbage; a check per output in jq as well
    cost 17 us for 32 rules and guarded nothing the evaluator does not.

    A rule proven to yield one output or fail before any (:func:`.single.single_output`)
    has that first output without ``label``/``break``, which are most of the wrapper's
    cost: it is mapped as it comes (``exact`` keeps the ``break`` for every rule; the
    tests compare both). Each rule's lines are the same either way (``$__loc__``).

    ``start``/``stop`` leave out the rules of ``indices`` outside ``[start, stop)``: what
    an evaluator runs to go on after a rule that faulted (or for one rule alone). Each rule
    left out keeps its lines, empty, so every rule still stands on the lines it has in the
    whole program. The whole program never tests where to start, rule by rule: that test
    took 17 us of jq's time for 32 rules, on every delivery, for what only a resumption
    needs.

    ``sweep`` builds the program a sweep runs (:func:`evaluate_match`): every rule under one
    alarm, emitting only what decides something. A truthy first output becomes the rule's
    index (the number), a falsy one or none nothing at all, an error ``[index, "e" +
    message]``; so a delivery that matches nothing costs one output, not one per rule (and
    none of the per-rule Python between them). Each rule keeps its lines.
    """
    error = json.dumps(wire.JQ_ERROR)
    cut = wire.JQ_VERDICT_MAX - len(wire.JQ_ERROR)
    verdict = "if . then true else . end"
    chunks = []
    present = False
    for k, i in enumerate(indices):
        if sweep:
            verdict = f"if . then {i} else empty end"
        # newlines (twice: a comment's backslash continuation eats one) keep a trailing
        # comment from swallowing the wrapper; brackets are checked balanced beforehand
        if not exact and single_output(exprs[i]):
            body = f"(($__e | (\n{exprs[i]}\n\n)) | ({verdict}))"
        else:  # no output: false, or in a sweep nothing (no match)
            body = (
                f"(label $__l | (($__e | (\n{exprs[i]}\n\n)) | "
                f"(({verdict}), break $__l)){'' if sweep else ', false'})"
            )
        message = f"({error} + (tostring | .[:{cut}]))"
        part = f"(try {body} catch {f'[{i}, {message}]' if sweep else message})"
        newline = "\n" if k else ""
        if i < start or (stop is not None and i >= stop):
            chunks.append(newline + "\n" * part.count("\n"))
        else:
            chunks.append(newline + ("," if present else "") + part)
            present = True
    body = "".join(chunks) if present else "empty"
    # $__s (the start) is no longer read by the wrapper; it stays bound so a rule that
    # names it compiles, and reads, as it did
    return f"{PRELUDE}.[0] as $__s | .[1] as $__e | ({body})"


def _compile(program: str, params: dict[str, Any]) -> Any:
    return jq.compile(program, args={"params": params})


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
                compiled = _compile(program, params)  # held: freed, it would measure nothing
                out = wire.encode_trial(None, max(resident() - before, 0))
                del compiled
            except Exception as exc:  # noqa: BLE001 - any compile failure is reported
                out = wire.encode_trial(_clean(str(exc)))
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
                self.errors[i] = "syntax error: unbalanced brackets"
        good = [i for i in range(len(exprs)) if i not in self.errors]
        err, size = attempt(good) if good else (None, 0)
        if good and (err is not None or size > limit):
            for i in good:  # which rules: each alone, in what is left of the deadline
                err, size = attempt([i])
                if err is not None:
                    self.errors[i] = err
                elif size > limit:
                    self.errors[i] = too_large(size, limit)
            rest = [i for i in good if i not in self.errors]
            err, size = attempt(rest) if rest else (None, 0)
            if err is not None or size > limit:
                why = (
                    f"{err} (the rule set as a whole)"
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
        self.program = _compile(build_program(exprs, good, sweep=True), params) if good else None
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
                found = _compile(
                    build_program(self.exprs, self.good, start=key[0], stop=key[1]), self.params
                )
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            self._parts[key] = found
        return found

    def error_lines(self) -> list[str]:
        return [wire.CompileError(i, m).encode() for i, m in sorted(self.errors.items())]


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
        return sweep_match(fd, header, env, rules, cfg, progress)
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
            # re-arming replaces the last rule's alarm, so the hot path never disarms (one
            # syscall a rule, not two); arm, then name the rule, so an alarm that fires
            # in between names the rule whose time it measured
            setitimer(timer, limit if limit <= left else left)
            pack(progress, 0, i, rule_limit if limit <= left else budget_limit, b"0")
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


def sweep_match(  # pragma: no cover - child
    fd: int,
    header: wire.EvalHeader,
    env: bytes,
    rules: RuleSet,
    cfg: wire.ChildConfig,
    progress: mmap.mmap,
) -> int | None:
    """:func:`evaluate_match` as a sweep: every rule in one go, under one alarm.

    The alarm is one rule's limit (with the parse allowance, and never past the budget):
    a sweep that ends within it kept every rule within its own, and one that does not
    dies armed for a sweep (:data:`.protocol.SWEEP`, no rule named), and the server goes
    rule by rule instead. jq emits only what decides (:func:`build_program`): nothing for
    a delivery that matches no rule, so its rules cost one output and two alarms.
    """
    head = "".join(rules.error_lines())
    program = rules.program
    if program is None:
        _send(fd, head + "d\n")
        return None
    good = rules.good_set
    parse = len(env) * cfg.parse_s_per_byte
    limit = min(cfg.rule_ms, header.budget_ms) / 1000 + parse
    error_v = wire.JQ_ERROR
    end, code = "d\n", 0
    lines = []
    signal.setitimer(signal.ITIMER_REAL, limit)
    # arm, then name it: an alarm in between still finds the sweep armed
    wire.pack_progress(progress, 0, rules.good[0], wire.SWEEP.encode(), b"0")
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
    _send(fd, head + "".join(lines) + end)
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
                first = False
                pack(progress, 0, i, rule_limit if limit <= left else budget_limit, b"0")
                setitimer(timer, limit if limit <= left else left)
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


class Zygote:
    """Holds one compiled rule set and forks evaluators that serve the server's sockets."""

    def __init__(self, ctrl: socket.socket, cfg: wire.ChildConfig) -> None:
        self.ctrl = ctrl
        self.cfg = cfg
        self.rules: RuleSet | None = None
        # pidfd -> (pid, socket, progress page)
        self.children: dict[int, tuple[int, socket.socket, mmap.mmap]] = {}

    def handle(self, data: bytes, fd: int) -> None:
        sock = socket.socket(fileno=fd)
        try:
            req = wire.Request.decode(data)
            sock.settimeout(2.0)
            frame = wire.read_frame(sock)  # the rule set: every request carries it
            if self.rules is None:
                exprs, params = wire.decode_spec(frame)
                self.rules = RuleSet(exprs, params, self.cfg)
                gc.collect()
                gc.freeze()  # keep the collector off the pages every evaluator shares
            if req.op == wire.COMPILE:
                answer = [*self.rules.error_lines(), wire.DONE.encode()]
                sock.sendall("".join(answer).encode())
                sock.close()
                return
            sock.settimeout(None)
        except (OSError, EOFError, ValueError, KeyError, TypeError):
            sock.close()
            return
        progress = wire.progress_page()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            gc.disable()  # never touch (and so copy) the zygote's heap pages
            _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
            self.ctrl.close()
            for pidfd, (_, other, page) in self.children.items():
                os.close(pidfd)
                other.close()
                page.close()
            try:
                evaluator(sock.detach(), self.rules, self.cfg, progress)
            finally:  # e.g. the server hung up mid-answer: never unwind into the zygote
                os._exit(4)
        self.children[os.pidfd_open(pid)] = (pid, sock, progress)

    def reap(self, pidfd: int) -> None:
        pid, sock, progress = self.children.pop(pidfd)
        os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        armed = wire.armed_at_death(progress)
        progress.close()
        # An evaluator that died mid-rule never sent its progress: report the armed rule.
        report = (armed.encode() if armed else "") + wire.Exited(
            os.waitstatus_to_exitcode(status)
        ).encode()
        try:
            sock.setblocking(False)
            sock.send(report.encode())
        except OSError:
            pass
        sock.close()

    def run(self) -> None:
        while True:
            watched: list[int] = [self.ctrl.fileno(), *self.children]
            ready, _, _ = select.select(watched, [], [])
            for item in ready:
                if item == self.ctrl.fileno():
                    data, fds, _, _ = socket.recv_fds(self.ctrl, 65536, 1)
                    if not data:
                        return self.finish()
                    if fds:
                        self.handle(data, fds[0])
                else:
                    self.reap(item)

    def finish(self) -> None:
        """Evicted or shut down: idle evaluators exit now, busy ones after their answer."""
        for _, sock, _ in self.children.values():
            try:
                sock.shutdown(socket.SHUT_RD)
            except OSError:
                pass
        for pidfd in list(self.children):
            self.reap(pidfd)
        os._exit(0)


def _zygote_main(ctrl: socket.socket, cfg: wire.ChildConfig) -> None:  # pragma: no cover
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    mem = cfg.memory_bytes
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    Zygote(ctrl, cfg).run()


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children", "rb") as f:
            return [int(c) for c in f.read().split()]
    except (OSError, ValueError):
        return []


def pss(pid: int) -> int:
    """A process's proportional set size in bytes (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def tree_pss(pid: int) -> int:
    """The proportional set size of ``pid`` and every descendant: shared pages counted once."""
    return pss(pid) + sum(tree_pss(c) for c in _children(pid))


class ForkServer:
    """Forks zygotes (one per rule set and webhook) and hands them requests.

    Keeps at most ``cache_size`` zygotes, and while the tree's memory (PSS, measured every
    ``MEASURE_S`` while anything changed) is over ``budget_bytes`` evicts the least recently
    used one (never the newest): its idle evaluators exit at once, busy ones after their answer.
    """

    def __init__(self, ctrl: socket.socket, cfg: wire.ChildConfig) -> None:
        self.ctrl = ctrl
        self.cfg = cfg
        self.zygotes: OrderedDict[str, tuple[int, socket.socket]] = OrderedDict()
        self.changed_at = 0.0  #: when a zygote was last started (then: measure again)
        self.measured_at = 0.0

    def spawn(self, key: str) -> socket.socket:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            mine.close()
            self.ctrl.close()
            try:
                for _, other in self.zygotes.values():
                    other.close()
                _zygote_main(theirs, self.cfg)
            finally:  # never unwind into the fork server's loop
                os._exit(0)
        theirs.close()
        self.zygotes[key] = (pid, mine)
        self.changed_at = time.monotonic()
        while len(self.zygotes) > self.cfg.cache_size:
            self.evict()
        return mine

    def evict(self) -> None:
        """Let the least recently used zygote go (it exits once its evaluators have)."""
        _, (_, old) = self.zygotes.popitem(last=False)
        old.close()  # the zygote sees EOF, shuts its evaluators' sockets and exits

    def dispatch(self, data: bytes, fd: int | None) -> None:
        try:
            req = wire.Request.decode(data)
        except (ValueError, KeyError, TypeError):
            if fd is not None:
                os.close(fd)
            return
        key = req.key
        if fd is None:  # TOUCH: in use, so not the next to go
            if key in self.zygotes:
                self.zygotes.move_to_end(key)
            return
        try:
            for _ in range(2):
                if key in self.zygotes:
                    self.zygotes.move_to_end(key)
                    zsock = self.zygotes[key][1]
                else:
                    zsock = self.spawn(key)
                try:
                    socket.send_fds(zsock, [data], [fd])
                    return
                except OSError:
                    self.drop(key)
        finally:
            os.close(fd)

    def drop(self, key: str) -> None:
        entry = self.zygotes.pop(key, None)
        if entry is not None:
            entry[1].close()

    def keep_budget(self) -> None:
        """Measure the tree (only while something changed lately) and evict down to budget."""
        now = time.monotonic()
        if now - self.measured_at < MEASURE_S or now - self.changed_at > 10 * MEASURE_S:
            return
        self.measured_at = now
        total = pss(os.getpid())
        sizes = {key: tree_pss(pid) for key, (pid, _) in self.zygotes.items()}
        total += sum(sizes.values())
        for key in list(self.zygotes)[:-1]:  # oldest first, never the newest
            if total <= self.cfg.budget_bytes:
                break
            self.drop(key)
            total -= sizes[key]
            self.changed_at = now  # keep measuring until the evicted ones are gone

    def run(self) -> None:
        self.ctrl.send(wire.READY)
        while True:
            socks = {s: k for k, (_, s) in self.zygotes.items()}
            watched: list[socket.socket] = [self.ctrl, *socks]
            ready, _, _ = select.select(watched, [], [], MEASURE_S)
            for sock in ready:
                if sock is self.ctrl:
                    data, fds, _, _ = socket.recv_fds(self.ctrl, 65536, 1)
                    if not data:
                        return self.shutdown()
                    self.dispatch(data, fds[0] if fds else None)
                elif sock in socks and not sock.recv(16):
                    self.drop(socks[sock])  # a zygote died or exited
            self.reap()
            self.keep_budget()

    @staticmethod
    def reap() -> None:
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass

    def shutdown(self) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if os.getpgid(0) == os.getpid():  # only ever our own group (started as a session)
            os.killpg(0, signal.SIGTERM)  # every zygote and evaluator (all SIG_DFL), not us
        try:
            while True:
                os.waitpid(-1, 0)  # as subreaper this also collects orphaned evaluators
        except ChildProcessError:
            pass
        os._exit(0)


def main(argv: list[str]) -> None:
    """Entry point: ``[MODULE, CTRL_FD, CONFIG_JSON]`` (how the server runs it: sandbox.py)."""
    os.environ.clear()  # the interpreter's locale coercion sets LC_CTYPE; jq must see none
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    ctrl = socket.socket(fileno=int(argv[1]))
    ForkServer(ctrl, wire.ChildConfig.decode(argv[2])).run()


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv)
