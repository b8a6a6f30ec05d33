"""The sandbox's fork server and zygotes: the only processes that ever run tenant jq.

Process tree (one process group, the fork server is a child subreaper)::

    fork server   imports jq, forks one zygote per rule set (LRU), never runs tenant jq
    └── zygote    RLIMIT_AS, compiles its rule set once (after proving it safe in a forked trial)
        └── evaluator, one per evaluation: SIGALRM hard stop per rule, writes one line per rule

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

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
LIMIT_MSG = "compilation exceeded the sandbox's memory or time limit"
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


def build_program(exprs: list[str], indices: list[int]) -> str:
    """One program over ``[start, envelope]`` streaming one short verdict string per rule."""
    match, no_match = json.dumps(wire.JQ_MATCH), json.dumps(wire.JQ_NO_MATCH)
    error, garbage = json.dumps(wire.JQ_ERROR), json.dumps(wire.JQ_GARBAGE)
    parts = []
    for i in indices:
        # newlines (twice: a comment's backslash continuation eats one) keep a trailing
        # comment from swallowing the wrapper; brackets are checked balanced beforehand
        parts.append(
            f"(if $__s <= {i} then (try ([$__e | first((\n{exprs[i]}\n\n))] | "
            f"if length == 0 then {no_match} elif (.[0] == null or .[0] == false) then "
            f"{no_match} else {match} end) catch ({error} + tostring)) else empty end)"
        )
    body = ",\n".join(parts)
    return (
        f"{PRELUDE}.[0] as $__s | .[1] as $__e | ({body}) | "
        f'if type == "string" then .[:{wire.JQ_VERDICT_MAX}] else {garbage} end'
    )


def _compile(program: str, params: dict[str, Any]) -> Any:
    return jq.compile(program, args={"params": params})


def _clean(msg: str) -> str:
    lines = [ln for ln in msg.splitlines() if ln.strip()]
    return " ".join(lines[:2])[:500] if lines else "compile error"


def trial(program: str, params: dict[str, Any], compile_ms: int) -> str | None:
    """Compile ``program`` in a forked child under the limits: None when it compiles."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        os.close(r)
        signal.setitimer(signal.ITIMER_REAL, compile_ms / 1000)
        try:
            _compile(program, params)
            out = wire.encode_trial(None)
        except Exception as exc:  # noqa: BLE001 - any compile failure is reported
            out = wire.encode_trial(_clean(str(exc)))
        os.write(w, out)
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
    how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit {code}"
    return f"{LIMIT_MSG} ({how})"


class RuleSet:
    """A compiled rule set: the program over the rules that compile, and the others' errors."""

    def __init__(self, exprs: list[str], params: dict[str, Any], compile_ms: int) -> None:
        self.errors: dict[int, str] = {}
        for i, expr in enumerate(exprs):
            if not balanced(expr):
                self.errors[i] = "syntax error: unbalanced brackets"
        good = [i for i in range(len(exprs)) if i not in self.errors]
        if good and trial(build_program(exprs, good), params, compile_ms) is not None:
            for i in good:
                err = trial(build_program(exprs, [i]), params, compile_ms)
                if err is not None:
                    self.errors[i] = err
            rest = [i for i in good if i not in self.errors]
            if rest and trial(build_program(exprs, rest), params, compile_ms) is not None:
                for i in rest:
                    self.errors[i] = f"{LIMIT_MSG} (the rule set as a whole)"
            good = [i for i in good if i not in self.errors]
        self.good = good
        # proven safe by a trial under identical limits, so this cannot take the zygote down
        self.program = _compile(build_program(exprs, good), params) if good else None

    def error_lines(self) -> list[str]:
        return [wire.CompileError(i, m).encode() for i, m in sorted(self.errors.items())]


def _send(fd: int, text: str) -> None:
    data = text.encode("utf-8", "replace")
    while data:
        data = data[os.write(fd, data) :]


def evaluator(fd: int, rules: RuleSet, cfg: wire.ChildConfig, progress: mmap.mmap) -> None:  # pragma: no cover - child
    """Evaluate one envelope (in a fresh process) and exit.

    Verdicts are sent in one message at the end: the rule being evaluated lives in the
    shared ``progress`` page, from which the zygote reports the culprit if a per-rule
    alarm kills this process. Errors are sent at once, so a later death cannot lose them.
    """
    sock = socket.socket(fileno=fd)
    sock.settimeout(2.0)
    header, env = wire.decode_eval(wire.read_frame(sock))
    start, budget = header.start, header.budget_ms / 1000
    out = [wire.Pid(os.getpid()).encode(), *rules.error_lines()]
    todo = [i for i in rules.good if i >= start]
    t0 = time.monotonic()
    parse = len(env) * cfg.parse_s_per_byte
    budget += parse

    def arm(i: int, extra: float) -> str | None:
        """Start rule ``i``'s alarm; its Armed line, or None when the budget is spent."""
        left = budget - (time.monotonic() - t0)
        if left <= 0.001:
            signal.setitimer(signal.ITIMER_REAL, 0)
            return None
        limit = cfg.rule_ms / 1000 + extra
        armed = wire.Armed(i, wire.RULE_LIMIT if limit <= left else wire.BUDGET_LIMIT)
        wire.arm_progress(progress, armed)
        signal.setitimer(signal.ITIMER_REAL, min(limit, left))
        return armed.encode()

    def spent(i: int) -> str:
        return wire.BudgetSpent(i).encode() + wire.DONE.encode()

    def finish(text: str, code: int = 0) -> NoReturn:
        wire.finish_progress(progress)
        _send(fd, text)
        os._exit(code)

    program = rules.program
    if not todo or program is None:
        finish("".join(out) + wire.DONE.encode())
    line = arm(todo[0], parse)
    if line is None:
        finish("".join(out) + spent(todo[0]))
    # The pid and the first armed rule go out now: the parent times the budget from here.
    _send(fd, "".join(out) + line)
    pending: list[str] = []
    text = b"[%d,%s]" % (start, env)
    try:
        results = iter(program.input_text(text.decode("utf-8")))
        for k, i in enumerate(todo):
            verdict = next(results)
            signal.setitimer(signal.ITIMER_REAL, 0)
            if verdict == wire.JQ_MATCH:
                finish("".join(pending) + wire.Matched(i).encode() + wire.DONE.encode())
            elif verdict == wire.JQ_NO_MATCH:
                pending.append(wire.NoMatch(i).encode())
            elif isinstance(verdict, str) and verdict.startswith(wire.JQ_ERROR):
                pending.append(wire.RuleError(i, verdict[len(wire.JQ_ERROR) :]).encode())
                _send(fd, "".join(pending))
                pending = []
            else:
                garbage = wire.Garbage(f"unexpected output from rule {i}")
                finish("".join(pending) + garbage.encode(), 3)
            if k + 1 < len(todo):
                nxt = arm(todo[k + 1], 0.0)
                if nxt is None:
                    finish("".join(pending) + spent(todo[k + 1]))
                pending.append(nxt)
        finish("".join(pending) + wire.DONE.encode())
    except StopIteration:
        finish("".join(pending) + wire.Garbage("evaluation ended early").encode(), 3)
    except Exception as exc:  # noqa: BLE001 - e.g. the envelope did not parse
        finish("".join(pending) + wire.Garbage(str(exc)[:300]).encode(), 3)


class Zygote:
    """Holds one compiled rule set and forks an evaluator per request."""

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
            frame = wire.read_frame(sock)
            if self.rules is None:
                exprs, params = wire.decode_spec(frame)
                self.rules = RuleSet(exprs, params, self.cfg.compile_ms)
                gc.collect()
                gc.freeze()  # keep the collector off the pages every evaluator shares
            if req.op == wire.COMPILE or self.rules.program is None:
                # an evaluation where nothing compiles: answer as an evaluator would, unforked
                me = [] if req.op == wire.COMPILE else [wire.Pid(os.getpid()).encode()]
                answer = [*me, *self.rules.error_lines(), wire.DONE.encode()]
                sock.sendall("".join(answer).encode())
                sock.close()
                return
        except (OSError, EOFError, ValueError, KeyError, TypeError):
            sock.close()
            return
        progress = wire.progress_page()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            gc.disable()  # short-lived: never touch (and so copy) the zygote's heap pages
            _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
            self.ctrl.close()
            for pidfd, (_, other, _) in self.children.items():
                os.close(pidfd)
                other.close()
            evaluator(sock.detach(), self.rules, self.cfg, progress)
            os._exit(0)
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
        for pidfd in list(self.children):
            self.reap(pidfd)
        os._exit(0)


def _zygote_main(ctrl: socket.socket, cfg: wire.ChildConfig) -> None:  # pragma: no cover
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    mem = cfg.memory_bytes
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    Zygote(ctrl, cfg).run()


class ForkServer:
    """Forks zygotes (one per rule set, LRU-bounded) and hands them requests."""

    def __init__(self, ctrl: socket.socket, cfg: wire.ChildConfig) -> None:
        self.ctrl = ctrl
        self.cfg = cfg
        self.zygotes: OrderedDict[str, tuple[int, socket.socket]] = OrderedDict()

    def spawn(self, key: str) -> socket.socket:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            mine.close()
            self.ctrl.close()
            for _, other in self.zygotes.values():
                other.close()
            _zygote_main(theirs, self.cfg)
            os._exit(0)
        theirs.close()
        self.zygotes[key] = (pid, mine)
        while len(self.zygotes) > self.cfg.cache_size:
            _, (_, old) = self.zygotes.popitem(last=False)
            old.close()  # the zygote sees EOF, waits for its evaluators and exits
        return mine

    def dispatch(self, data: bytes, fd: int) -> None:
        key = wire.Request.decode(data).key
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

    def run(self) -> None:
        self.ctrl.send(wire.READY)
        while True:
            socks = {s: k for k, (_, s) in self.zygotes.items()}
            watched: list[socket.socket] = [self.ctrl, *socks]
            ready, _, _ = select.select(watched, [], [], 0.5)
            for sock in ready:
                if sock is self.ctrl:
                    data, fds, _, _ = socket.recv_fds(self.ctrl, 65536, 1)
                    if not data:
                        return self.shutdown()
                    if fds:
                        self.dispatch(data, fds[0])
                elif sock in socks and not sock.recv(16):
                    self.drop(socks[sock])  # a zygote died or exited
            self.reap()

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
