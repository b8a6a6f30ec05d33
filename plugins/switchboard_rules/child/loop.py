"""The child's loops: the fork server forking zygotes, each zygote forking its evaluators."""

from __future__ import annotations

import ctypes
import gc
import mmap
import os
import resource
import select
import signal
import socket
import time
from collections import OrderedDict, deque
from typing import Any

from .. import protocol as wire
from .evaluate import evaluator
from .ruleset import RuleSet

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
#: How often the fork server measures its tree's memory while anything changed.
MEASURE_S = 0.5

try:
    # Resolved once here: every evaluator calls it right after fork, where loading libc
    # through ctypes again would fault in (and copy) pages on the hot path.
    _PRCTL: Any = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # pragma: no cover - non-Linux
    _PRCTL = None


def _prctl(option: int, arg: int) -> None:
    if _PRCTL is not None:
        _PRCTL(option, arg, 0, 0, 0)


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
                    try:  # taken up: the fork server stops holding it against takeup_ms
                        self.ctrl.send(wire.TAKEN)
                    except OSError:
                        pass
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
    A zygote that leaves a request untaken for ``takeup_ms`` (stopped, or hung) is killed,
    its evaluators with it: its rule set's next request gets a new one.
    """

    def __init__(self, ctrl: socket.socket, cfg: wire.ChildConfig) -> None:
        self.ctrl = ctrl
        self.cfg = cfg
        self.zygotes: OrderedDict[str, tuple[int, socket.socket]] = OrderedDict()
        self.changed_at = 0.0  #: when a zygote was last started (then: measure again)
        self.measured_at = 0.0
        #: by zygote pid: when each request sent to it must have been taken up (oldest first)
        self.due: dict[int, deque[float]] = {}

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
        self.drop(next(iter(self.zygotes)))

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
                else:
                    self.spawn(key)
                pid, zsock = self.zygotes[key]
                try:
                    socket.send_fds(zsock, [data], [fd])
                except OSError:
                    self.drop(key)
                    continue
                if self.cfg.takeup_ms:
                    due = time.monotonic() + self.cfg.takeup_ms / 1000
                    self.due.setdefault(pid, deque()).append(due)
                return
        finally:
            os.close(fd)

    def drop(self, key: str) -> None:
        """Let ``key``'s zygote go: it sees EOF, shuts its evaluators' sockets and exits."""
        entry = self.zygotes.pop(key, None)
        if entry is not None:
            self.due.pop(entry[0], None)
            entry[1].close()

    def heard(self, key: str) -> None:
        """Read what ``key``'s zygote said: a word per request taken up; EOF: it is gone."""
        pid, zsock = self.zygotes[key]
        while True:
            try:
                said = zsock.recv(16, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return
            except OSError:
                said = b""
            if not said:  # it died or exited
                self.drop(key)
                return
            due = self.due.get(pid)
            if due:
                due.popleft()

    def kill_stuck(self) -> None:
        """Kill each zygote that left a request untaken past its due time.

        It is stopped (SIGSTOP) or hung, and would hold every request of its rule set (each
        waiting out its deadline) for as long as it stays so: killed (SIGKILL reaches a
        stopped process too; its evaluators die with it, PDEATHSIG) and dropped, so the next
        request starts a new one, and continuing the old one later leaves nothing behind.
        """
        now = time.monotonic()
        for key, (pid, _) in list(self.zygotes.items()):
            due = self.due.get(pid)
            if not due or due[0] > now:
                continue
            self.heard(key)  # what it said meanwhile: this loop may have been held up itself
            due = self.due.get(pid)
            if due and due[0] <= now:
                try:  # not reaped yet (reap() comes later), so the pid is still ours
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.drop(key)

    def wait_s(self) -> float:
        """How long the loop may wait: until the next measure, or the next request's due time."""
        dues = [due[0] for due in self.due.values() if due]
        return max(0.0, min([MEASURE_S, *(d - time.monotonic() for d in dues)]))

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
            ready, _, _ = select.select(watched, [], [], self.wait_s())
            for sock in ready:
                if sock is self.ctrl:
                    data, fds, _, _ = socket.recv_fds(self.ctrl, 65536, 1)
                    if not data:
                        return self.shutdown()
                    self.dispatch(data, fds[0] if fds else None)
                    if fds:  # taken up: the server stops holding it against takeup_ms
                        self.ctrl.send(wire.TAKEN)
                elif sock in socks and self.zygotes.get(socks[sock], (0, None))[1] is sock:
                    self.heard(socks[sock])  # (not when dispatch dropped it meanwhile)
            self.kill_stuck()
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
    """Entry point: ``[MODULE, CTRL_FD, CONFIG_JSON]`` (how the server runs it: pool.py)."""
    os.environ.clear()  # the interpreter's locale coercion sets LC_CTYPE; jq must see none
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    ctrl = socket.socket(fileno=int(argv[1]))
    ForkServer(ctrl, wire.ChildConfig.decode(argv[2])).run()
