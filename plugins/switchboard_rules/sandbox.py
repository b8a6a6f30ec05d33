"""Run tenant jq rules out of process: a fork server, one zygote per rule set, a child per event.

This module is the server's side: it starts the fork server (:mod:`.sandbox_child`), talks
to it in :mod:`.protocol`, folds what each evaluator reports into an :class:`Attempt` and
lets :func:`.policy.judge` decide what the attempts mean.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from switchboard.plugin import MatchResult, StoreUnavailable

from . import protocol as wire
from .policy import BUSY, Attempt, judge

__all__ = ["Attempt", "Limits", "Sandbox", "SandboxUnavailable", "parse_line"]

#: This plugin's package, and the fork server's module in it.
_PACKAGE = __name__.rpartition(".")[0]
_CHILD_MODULE = f"{_PACKAGE}.sandbox_child"
#: How the fork server starts: ``python -I -c _BOOTSTRAP PACKAGE DIR MODULE CTRL_FD CONFIG``.
#: The package is stood in for by an empty module whose path is its directory, so the child
#: imports only its own modules (the child module, the protocol, the scanner) and jq: never
#: the package's ``__init__`` (the plugin's hooks and, through them, the whole host), which
#: would slow every start and leave the zygotes less of their address-space cap.
_BOOTSTRAP = (
    "import sys, types\n"
    "name, path, module = sys.argv[1:4]\n"
    "package = types.ModuleType(name)\n"
    "package.__path__ = [path]\n"
    "sys.modules[name] = package\n"
    "__import__(module, fromlist=['main']).main(sys.argv[3:])\n"
)
#: Time allowed for parsing the envelope on top of the budgets (~0.1 ms per KB measured).
PARSE_S_PER_BYTE = 0.25e-3 / 1024


class SandboxUnavailable(StoreUnavailable):
    """The sandbox could not answer (busy or broken); the caller may retry later."""


@dataclass(frozen=True)
class Limits:
    """The sandbox's limits, named and counted as in ``[plugins.rules]``.

    No defaults here: those are written once, in ``stage.CONFIG_SCHEMA``, and filled into
    the plugin's config section before :meth:`from_config` reads it.
    """

    max_concurrency: int  #: evaluations and compiles running at once
    slot_wait_ms: int  #: how long a request waits for one of them (then: sandbox_busy)
    memory_mib: int  #: address space of each zygote and evaluator
    rule_ms: int  #: one rule's time
    event_ms: int  #: one event's time across all its rules
    kill_grace_ms: int  #: on top of event_ms, before the server kills an evaluator
    cache_size: int  #: zygotes kept, one per rule set
    compile_ms: int  #: one trial compile's time

    @classmethod
    def from_config(cls, section: Mapping[str, Any]) -> Limits:
        """The limits in the plugin's config section (its schema's defaults filled in)."""
        return cls(**{f.name: section[f.name] for f in fields(cls)})

    @property
    def slot_wait_s(self) -> float:
        return self.slot_wait_ms / 1000

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * 2**20


def parse_line(line: str, att: Attempt, now: float) -> None:
    """Fold one report line into ``att``; anything unexpected marks it garbage."""
    try:
        msg = wire.decode(line)
    except ValueError:
        att.garbage = f"unreadable sandbox output: {line[:80]!r}"
        return
    match msg:  # the per-rule lines first
        case wire.Armed(index, how):
            att.armed = (index, how)
            att.first_arm = att.first_arm or now
        case wire.NoMatch():
            att.armed = None
        case wire.Matched(index):
            att.matched = index
            att.armed = None
        case wire.RuleError(index, message):
            att.errors.append((index, message))
            att.armed = None
        case wire.Pid(pid):
            att.pid = pid
        case wire.CompileError(index, message):
            att.compile_errors[index] = message
        case wire.BudgetSpent(index):
            att.budget_at = index
        case wire.Done():
            att.done = True
        case wire.Exited(status):
            att.status = status
        case wire.Garbage(message):
            att.garbage = message


class Sandbox:
    """Evaluates and compiles rule sets in isolated, resource-capped child processes."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._slots = asyncio.Semaphore(limits.max_concurrency)
        self._proc: subprocess.Popen[bytes] | None = None
        self._ctrl: socket.socket | None = None
        self._lock = asyncio.Lock()

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """The fork server's pid (None when not running)."""
        return self._proc.pid if self._proc is not None else None

    async def start(self) -> None:
        """Start the fork server (a no-op when it is already running)."""
        async with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                return
            self._reset()
            mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            cfg = wire.ChildConfig(
                memory_bytes=self.limits.memory_bytes,
                rule_ms=self.limits.rule_ms,
                compile_ms=self.limits.compile_ms,
                cache_size=self.limits.cache_size,
                parse_s_per_byte=PARSE_S_PER_BYTE,
            )
            argv = [
                sys.executable,
                "-I",
                "-c",
                _BOOTSTRAP,
                _PACKAGE,
                str(Path(__file__).resolve().parent),
                _CHILD_MODULE,
                str(theirs.fileno()),
                cfg.encode(),
            ]
            try:
                self._proc = subprocess.Popen(
                    argv,
                    env={},
                    cwd="/",
                    pass_fds=[theirs.fileno()],
                    start_new_session=True,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            finally:
                theirs.close()
            mine.setblocking(False)
            self._ctrl = mine
            loop = asyncio.get_running_loop()
            try:
                async with asyncio.timeout(15):
                    hello = await loop.sock_recv(mine, 16)
            except TimeoutError:
                hello = b""
            if hello != wire.READY:
                self._reset()
                raise SandboxUnavailable("the routing sandbox did not start")

    def _reset(self) -> None:
        if self._ctrl is not None:
            self._ctrl.close()
            self._ctrl = None
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()

    async def close(self) -> None:
        """Stop the fork server and every zygote and evaluator under it."""
        async with self._lock:
            proc = self._proc
            if self._ctrl is not None:
                self._ctrl.close()  # EOF: the fork server kills and reaps everything
                self._ctrl = None
            if proc is not None:
                for _ in range(200):
                    if proc.poll() is not None:
                        break
                    await asyncio.sleep(0.01)
            self._reset()

    async def _ctrl_socket(self) -> socket.socket:
        if self._proc is None or self._proc.poll() is not None or self._ctrl is None:
            await self.start()
        assert self._ctrl is not None
        return self._ctrl

    # -- requests ----------------------------------------------------------------------------

    async def _request(self, op: str, spec: bytes, extra: bytes, deadline: float) -> Attempt:
        """Send one request and collect the answer until done, death or ``deadline``."""
        loop = asyncio.get_running_loop()
        request = wire.Request(op, hashlib.sha256(spec).hexdigest())
        att = Attempt()
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            mine.setblocking(False)
            for retry in (True, False):
                ctrl = await self._ctrl_socket()
                try:
                    socket.send_fds(ctrl, [request.encode()], [theirs.fileno()])
                    break
                except OSError:
                    async with self._lock:
                        self._reset()
                    if not retry:
                        raise
            theirs.close()
            await loop.sock_sendall(mine, wire.frame(spec) + extra)
            buf = b""
            async with asyncio.timeout_at(deadline):
                while not att.done and att.status is None and att.garbage is None:
                    chunk = await loop.sock_recv(mine, 65536)
                    if not chunk:
                        break
                    buf += chunk
                    *lines, buf = buf.split(b"\n")
                    now = loop.time()
                    for raw in lines:
                        parse_line(raw.decode("utf-8", "replace"), att, now)
        except TimeoutError:
            if att.pid is not None and not att.done and att.status is None:
                try:
                    os.kill(att.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            att.garbage = "sandbox missed its hard deadline"
        except OSError as exc:
            att.garbage = f"sandbox unreachable: {exc}"
        finally:
            mine.close()
            theirs.close()
            att.ended = loop.time()
        return att

    async def evaluate(
        self,
        rules: Sequence[tuple[str | None, str]],
        params: dict[str, Any],
        envelope: dict[str, Any],
    ) -> MatchResult:
        """The index of the first rule matching ``envelope`` (or None), plus faults."""
        if not rules:
            return MatchResult(None)
        if not await self._take_slot():
            return BUSY
        try:
            loop = asyncio.get_running_loop()
            ids = [rid for rid, _ in rules]
            spec = wire.encode_spec([e for _, e in rules], params or {})
            env = wire.encode_envelope(envelope)
            allowance = len(env) * PARSE_S_PER_BYTE
            deadline = loop.time() + (self.limits.event_ms + self.limits.kill_grace_ms) / 1000
            deadline += allowance
            attempts: list[Attempt] = []
            while True:
                step = judge(ids, attempts, rule_ms=self.limits.rule_ms,
                             event_ms=self.limits.event_ms)
                if isinstance(step, MatchResult):
                    return step
                body = wire.encode_eval(wire.EvalHeader(step.start, step.budget_ms), env)
                attempts.append(await self._request(wire.EVAL, spec, wire.frame(body), deadline))
        finally:
            self._slots.release()

    async def _take_slot(self) -> bool:
        """Wait up to ``slot_wait_s`` for one of the concurrency slots."""
        try:
            async with asyncio.timeout(self.limits.slot_wait_s):
                await self._slots.acquire()
        except TimeoutError:
            return False
        return True

    async def compile(self, exprs: list[str], params: dict[str, Any]) -> list[tuple[int, str]]:
        """Compile errors by rule index (empty when every expression compiles)."""
        if not exprs:
            return []
        if not await self._take_slot():
            raise SandboxUnavailable("the routing sandbox is busy; try again")
        try:
            loop = asyncio.get_running_loop()
            spec = wire.encode_spec(exprs, params or {})
            limits = self.limits
            budget = ((len(exprs) + 3) * limits.compile_ms + limits.kill_grace_ms) / 1000
            att = await self._request(wire.COMPILE, spec, b"", loop.time() + budget)
        finally:
            self._slots.release()
        if not att.done:
            raise SandboxUnavailable(f"the routing sandbox failed: {att.garbage or 'no answer'}")
        return sorted(att.compile_errors.items())
