"""Run tenant jq rules out of process: a fork server, one zygote per rule set, a child per event."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from switchboard.errors import StoreUnavailable
from switchboard.routing.model import Fault, MatchResult

_CHILD_MODULE = "switchboard.routing.sandbox_child"
#: Time allowed for parsing the envelope on top of the budgets (~0.1 ms per KB measured).
PARSE_S_PER_BYTE = 0.25e-3 / 1024


class SandboxUnavailable(StoreUnavailable):
    """The sandbox could not answer (busy or broken); the caller may retry later."""


@dataclass
class Attempt:
    """What one evaluator process reported before it finished or died."""

    pid: int | None = None
    compile_errors: dict[int, str] = field(default_factory=dict)
    errors: list[tuple[int, str]] = field(default_factory=list)
    matched: int | None = None
    armed: tuple[int, str] | None = None
    first_arm: float | None = None
    budget_at: int | None = None
    done: bool = False
    status: int | None = None
    garbage: str | None = None


def parse_line(line: str, att: Attempt, now: float) -> None:
    """Fold one protocol line into ``att``; anything unexpected marks it garbage."""
    kind, _, rest = line.partition(" ")
    try:
        if kind == "p":
            att.pid = int(rest)
        elif kind == "c":
            idx, _, msg = rest.partition(" ")
            att.compile_errors[int(idx)] = str(json.loads(msg))
        elif kind == "a":
            idx, _, how = rest.partition(" ")
            if how not in ("t", "b"):
                raise ValueError(line)
            att.armed = (int(idx), how)
            att.first_arm = att.first_arm or now
        elif kind == "r":
            idx, _, verdict = rest.partition(" ")
            if verdict == "m":
                att.matched = int(idx)
            elif verdict.startswith("e "):
                att.errors.append((int(idx), str(json.loads(verdict[2:]))))
            elif verdict != "n":
                raise ValueError(line)
            att.armed = None
        elif kind == "b":
            att.budget_at = int(rest)
        elif kind == "d":
            att.done = True
        elif kind == "x":
            att.status = int(rest)
        elif kind == "g":
            att.garbage = str(json.loads(rest))
        else:
            raise ValueError(line)
    except ValueError:
        att.garbage = f"unreadable sandbox output: {line[:80]!r}"


def _frame(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def _describe(status: int | None) -> str:
    if status is None:
        return "sandbox process exited without an answer"
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = str(-status)
        return f"evaluation process killed by {name} (memory cap, crash or abort)"
    return f"evaluation process exited with status {status}"


class Sandbox:
    """Evaluates and compiles rule sets in isolated, resource-capped child processes."""

    def __init__(
        self,
        *,
        max_concurrency: int = 2,
        slot_wait_s: float = 1.0,
        memory_bytes: int = 128 * 2**20,
        rule_ms: int = 50,
        event_ms: int = 250,
        kill_grace_ms: int = 1750,
        cache_size: int = 64,
        compile_ms: int = 1000,
    ) -> None:
        self.slot_wait_s = slot_wait_s
        self.memory_bytes = memory_bytes
        self.rule_ms = rule_ms
        self.event_ms = event_ms
        self.kill_grace_ms = kill_grace_ms
        self.cache_size = cache_size
        self.compile_ms = compile_ms
        self._slots = asyncio.Semaphore(max_concurrency)
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
            cfg = {
                "memory_bytes": self.memory_bytes,
                "rule_ms": self.rule_ms,
                "compile_ms": self.compile_ms,
                "cache_size": self.cache_size,
                "parse_s_per_byte": PARSE_S_PER_BYTE,
            }
            argv = [
                sys.executable,
                "-I",
                "-m",
                _CHILD_MODULE,
                str(theirs.fileno()),
                json.dumps(cfg),
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
            if hello != b"ready":
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
        key = hashlib.sha256(spec).hexdigest()
        att = Attempt()
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            mine.setblocking(False)
            for retry in (True, False):
                ctrl = await self._ctrl_socket()
                try:
                    socket.send_fds(
                        ctrl, [json.dumps({"op": op, "key": key}).encode()], [theirs.fileno()]
                    )
                    break
                except OSError:
                    async with self._lock:
                        self._reset()
                    if not retry:
                        raise
            theirs.close()
            await loop.sock_sendall(mine, _frame(spec) + extra)
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
            return MatchResult(None, (Fault(-1, "sandbox_busy"),))
        try:
            return await self._evaluate(rules, params or {}, envelope)
        finally:
            self._slots.release()

    async def _take_slot(self) -> bool:
        """Wait up to ``slot_wait_s`` for one of the concurrency slots."""
        try:
            async with asyncio.timeout(self.slot_wait_s):
                await self._slots.acquire()
        except TimeoutError:
            return False
        return True

    async def _evaluate(
        self,
        rules: Sequence[tuple[str | None, str]],
        params: dict[str, Any],
        envelope: dict[str, Any],
    ) -> MatchResult:
        loop = asyncio.get_running_loop()
        ids = [rid for rid, _ in rules]
        spec = json.dumps({"exprs": [e for _, e in rules], "params": params}, sort_keys=True)
        env = json.dumps(envelope, separators=(",", ":"), ensure_ascii=False).encode()
        allowance = len(env) * PARSE_S_PER_BYTE
        deadline = loop.time() + (self.event_ms + self.kill_grace_ms) / 1000 + allowance
        compile_errors: dict[int, str] = {}
        faults: list[Fault] = []

        def result(index: int | None, *extra: Fault) -> MatchResult:
            found = [Fault(i, "compile_error", ids[i], m) for i, m in compile_errors.items()]
            found += faults
            found.sort(key=lambda f: f.rule_index)
            return MatchResult(index, tuple(found) + extra)

        start, spent = 0, 0.0
        while start < len(rules):
            budget_ms = max(self.event_ms - spent * 1000, 0)
            head = json.dumps({"start": start, "budget_ms": budget_ms}).encode()
            att = await self._request("eval", spec.encode(), _frame(head + b"\n" + env), deadline)
            compile_errors.update(att.compile_errors)
            faults.extend(Fault(i, "error", ids[i], m) for i, m in att.errors)
            if att.matched is not None:
                return result(att.matched)
            if att.budget_at is not None:
                faults.append(Fault(att.budget_at, "budget_exhausted", ids[att.budget_at]))
                return result(None)
            if att.done:
                return result(None)
            if att.garbage is not None or att.status != -signal.SIGALRM or att.armed is None:
                detail = att.garbage or _describe(att.status)
                return result(None, Fault(-1, "sandbox_failure", detail=detail))
            index, how = att.armed
            if how == "b":
                faults.append(Fault(index, "budget_exhausted", ids[index]))
                return result(None)
            faults.append(Fault(index, "timeout", ids[index], f"rule exceeded {self.rule_ms} ms"))
            spent += loop.time() - (att.first_arm or loop.time())
            start = index + 1
            if start < len(rules) and spent * 1000 >= self.event_ms - 1:
                faults.append(Fault(start, "budget_exhausted", ids[start]))
                return result(None)
        return result(None)

    async def compile(self, exprs: list[str], params: dict[str, Any]) -> list[tuple[int, str]]:
        """Compile errors by rule index (empty when every expression compiles)."""
        if not exprs:
            return []
        if not await self._take_slot():
            raise SandboxUnavailable("the routing sandbox is busy; try again")
        try:
            loop = asyncio.get_running_loop()
            spec = json.dumps({"exprs": exprs, "params": params or {}}, sort_keys=True)
            budget = (len(exprs) + 3) * self.compile_ms / 1000 + self.kill_grace_ms / 1000
            att = await self._request("compile", spec.encode(), b"", loop.time() + budget)
        finally:
            self._slots.release()
        if not att.done:
            raise SandboxUnavailable(f"the routing sandbox failed: {att.garbage or 'no answer'}")
        return sorted(att.compile_errors.items())
