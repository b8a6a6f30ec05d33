"""Run tenant jq rules out of process: a fork server, one zygote per rule set, a child per event.

This module is the server's side: it starts the fork server (:mod:`.sandbox_child`), talks
to it in :mod:`.protocol`, folds what each evaluator reports into an :class:`Attempt` and
lets :func:`.policy.judge` decide what the attempts mean.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from switchboard.plugin import MatchResult, RuleVerdict, StoreUnavailable

from . import protocol as wire
from . import sandbox_metrics
from .policy import BUSY, Attempt, describe, judge, swept_out

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
HARD_DEADLINE = "sandbox missed its hard deadline"
#: The most deliveries of one rule set evaluated in one frame (those that arrived while its
#: last frame was out or its owner's slots were taken). Bounds how long the last waits
#: behind the others: at worst each of them spends its whole ``event_ms``. Eight: once the
#: program got cheaper (verdicts as jq values, no start test per rule) a frame of eight
#: takes less than the server saves by writing and answering them together
#: (bench/routing.py, alternating runs: 8 clients 0.78-0.82 of plain against 0.74-0.78 with
#: frames of four, 32 clients 0.91-0.99 against 0.83-0.92; with the old program it was the
#: other way round, and a cap of four won).
GROUP_MAX = 8
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

    max_concurrency: int  #: evaluations running at once (all owners together)
    owner_concurrency: int  #: evaluations one owner may run at once
    slot_wait_ms: int  #: how long a delivery waits for its slots (then: sandbox_busy)
    compile_concurrency: int  #: compiles (saves, dry runs) at once; one per owner
    compile_wait_ms: int  #: how long a compile waits for its slot (then: busy, try again)
    memory_mib: int  #: address space of each zygote and evaluator
    ruleset_mib: int  #: the most a compiled rule set may take (refused at save beyond)
    memory_budget_mib: int  #: the whole sandbox tree's memory (PSS), kept by eviction
    rule_ms: int  #: one rule's time
    event_ms: int  #: one event's time across all its rules
    kill_grace_ms: int  #: on top of event_ms, before the server kills an evaluator
    cache_size: int  #: zygotes kept, one per rule set and webhook
    compile_ms: int  #: a rule set's whole compile
    evaluator_uses: int  #: evaluations an evaluator serves before it is replaced

    @classmethod
    def from_config(cls, section: Mapping[str, Any]) -> Limits:
        """The limits in the plugin's config section (its schema's defaults filled in)."""
        return cls(**{f.name: section[f.name] for f in fields(cls)})

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
        case wire.Verdicts(_, chars):
            att.items.append((chars, dict(att.errors)))
            att.errors = []
            att.armed = None
        case wire.Done():
            att.done = True
        case wire.Exited(status):
            att.status = status
        case wire.Garbage(message):
            att.garbage = message


def _began(att: Attempt) -> bool:
    """Whether an evaluator had begun on the envelope ``att`` is for (said anything of it)."""
    return bool(
        att.done
        or att.armed is not None
        or att.errors
        or att.items
        or att.matched is not None
        or att.budget_at is not None
    )


@dataclass(eq=False)
class _Evaluator:
    """The server's end of one warm evaluator's socket."""

    key: str
    sock: socket.socket
    uses: int = 0
    pid: int | None = None  #: said once, in its first answer

    def alive(self) -> bool:
        """Quiet and open: ready for an evaluation (anything else means it exited meanwhile)."""
        try:
            self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            return True
        except OSError:
            return False
        return False  # EOF, or its zygote's exit report: it retired or was evicted


@dataclass
class _Shares:
    """One semaphore per owner (made on first use, dropped when nobody holds or waits)."""

    size: int
    held: dict[str, tuple[asyncio.Semaphore, int]] = field(default_factory=dict)

    def enter(self, owner: str) -> asyncio.Semaphore:
        sem, users = self.held.get(owner) or (asyncio.Semaphore(self.size), 0)
        self.held[owner] = (sem, users + 1)
        return sem

    def leave(self, owner: str) -> None:
        sem, users = self.held[owner]
        if users <= 1:
            del self.held[owner]
        else:
            self.held[owner] = (sem, users - 1)


class Sandbox:
    """Evaluates and compiles rule sets in isolated, resource-capped child processes.

    Fairness: an evaluation holds one of its owner's ``owner_concurrency`` slots and one of
    the ``max_concurrency`` slots of everyone, taken in that order, so one owner's slow or
    faulting rules wait in that owner's queue and never hold more than its share. Compiles
    (saves and dry runs) have their own ``compile_concurrency`` slots, one per owner at a
    time: they never take an evaluation's.

    Speed: each rule set (per webhook) keeps up to ``owner_concurrency`` warm evaluators
    here, started from its zygote ahead of need (after a save's compile, and whenever
    overlapping deliveries take its last idle one) and reused until one faults, retires after
    ``evaluator_uses`` evaluations or grows past its memory allowance.
    """

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._slots = asyncio.Semaphore(limits.max_concurrency)
        self._owners = _Shares(limits.owner_concurrency)
        self._compile_slots = asyncio.Semaphore(limits.compile_concurrency)
        self._compilers = _Shares(1)
        self._frames = _Shares(1)  #: one evaluation frame in flight per rule set
        self._proc: subprocess.Popen[bytes] | None = None
        self._ctrl: socket.socket | None = None
        self._lock = asyncio.Lock()
        #: warm evaluators by rule-set key, least recently used first
        self._idle: OrderedDict[str, list[_Evaluator]] = OrderedDict()
        self._live: dict[str, int] = {}  #: evaluators started per key and not yet closed
        self._busy: dict[str, int] = {}  #: evaluations in flight per key
        self._touched: dict[str, float] = {}
        self._refills: dict[str, asyncio.Task[None]] = {}
        self._specs: dict[tuple[str, tuple[str, ...], str], tuple[bytes, str]] = {}
        #: rule sets whose sweep ran out of time or crashed: they go rule by rule
        self._by_rule: OrderedDict[str, None] = OrderedDict()
        #: since the sandbox was created: evaluator processes started, and attempts served by a
        #: warm evaluator or by one started for them (figures for tests and benchmarks)
        self.stats = {"spawned": 0, "warm": 0, "fresh": 0, "grouped": 0}
        #: deliveries of one rule set waiting for their owner's slot together, by key
        self._forming: dict[str, list[tuple[bytes, asyncio.Future[MatchResult] | None]]] = {}
        self._handed: set[asyncio.Task[MatchResult]] = set()

    @staticmethod
    def key(scope: str, spec: bytes) -> str:
        """A rule set's zygote: the same rules of two webhooks never share one."""
        return hashlib.sha256(scope.encode() + b"\0" + spec).hexdigest()

    def _spec(self, scope: str, exprs: list[str], params: dict[str, Any]) -> tuple[bytes, str]:
        """A rule set's canonical bytes and key (remembered: every delivery asks again)."""
        memo = (scope, tuple(exprs), json.dumps(params, sort_keys=True) if params else "")
        found = self._specs.get(memo)
        if found is None:
            spec = wire.encode_spec(exprs, params)
            found = self._specs[memo] = (spec, self.key(scope, spec))
            if len(self._specs) > 2 * self.limits.cache_size:
                del self._specs[next(iter(self._specs))]  # the oldest remembered
        return found

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
            limits = self.limits
            cfg = wire.ChildConfig(
                memory_bytes=limits.memory_bytes,
                rule_ms=limits.rule_ms,
                compile_ms=limits.compile_ms,
                cache_size=limits.cache_size,
                parse_s_per_byte=PARSE_S_PER_BYTE,
                ruleset_bytes=limits.ruleset_mib * 2**20,
                budget_bytes=limits.memory_budget_mib * 2**20,
                # an evaluator may grow by a quarter of its cap before it is replaced
                retire_bytes=limits.memory_bytes // 4,
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
        for task in self._refills.values():
            task.cancel()
        self._refills.clear()
        for pool in self._idle.values():
            for ev in pool:
                ev.sock.close()
        self._idle.clear()
        self._live.clear()
        self._busy.clear()
        self._touched.clear()
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
            for task in self._refills.values():
                task.cancel()
            for pool in self._idle.values():
                for ev in pool:
                    ev.sock.close()  # EOF: each evaluator exits
            self._idle.clear()
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

    # -- slots -----------------------------------------------------------------------------

    @asynccontextmanager
    async def _hold(
        self,
        shares: _Shares,
        slots: asyncio.Semaphore,
        owner: str,
        wait_s: float,
        on_wait: Callable[[float, bool], None] | None = None,
        frame: str | None = None,
    ) -> AsyncIterator[bool]:
        """The owner's slot, then everyone's, within ``wait_s`` together: False when not.

        With ``frame`` (a rule set's key), first the end of that rule set's frame in flight:
        one frame per rule set at a time, so what arrives meanwhile goes in the next one.
        ``on_wait(seconds, acquired)`` is told of a wait (only when something was taken).
        """
        sems = [self._frames.enter(frame)] if frame is not None else []
        sems += [shares.enter(owner), slots]
        got = 0
        try:
            if not any(sem.locked() for sem in sems):  # all free: no timer to set up
                for sem in sems:
                    await sem.acquire()
                    got += 1
            else:
                began = time.monotonic()
                try:
                    async with asyncio.timeout(wait_s):
                        for sem in sems:
                            await sem.acquire()
                            got += 1
                except TimeoutError:
                    pass
                if on_wait is not None:
                    on_wait(time.monotonic() - began, got == len(sems))
            yield got == len(sems)
        finally:
            for sem in reversed(sems[:got]):
                sem.release()
            shares.leave(owner)
            if frame is not None:
                self._frames.leave(frame)

    # -- evaluators --------------------------------------------------------------------------

    async def _open(self, op: str, key: str, spec: bytes) -> socket.socket:
        """A request socket to ``key``'s zygote (started by the fork server when needed)."""
        loop = asyncio.get_running_loop()
        request = wire.Request(op, key).encode()
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            mine.setblocking(False)
            for retry in (True, False):
                ctrl = await self._ctrl_socket()
                try:
                    socket.send_fds(ctrl, [request], [theirs.fileno()])
                    break
                except OSError:
                    async with self._lock:
                        self._reset()
                    if not retry:
                        raise
            await loop.sock_sendall(mine, wire.frame(spec))
        except BaseException:
            mine.close()
            raise
        finally:
            theirs.close()
        return mine

    async def _spawn(self, key: str, spec: bytes) -> _Evaluator:
        sock = await self._open(wire.SPAWN, key, spec)
        self._live[key] = self._live.get(key, 0) + 1
        self.stats["spawned"] += 1
        return _Evaluator(key, sock)

    def _discard(self, ev: _Evaluator) -> None:
        ev.sock.close()
        left = self._live.get(ev.key, 1) - 1
        if left > 0:
            self._live[ev.key] = left
        else:
            self._live.pop(ev.key, None)

    def _touch(self, key: str) -> None:
        """Tell the fork server ``key`` is in use (at most once a second per key)."""
        now = asyncio.get_running_loop().time()
        if now - self._touched.get(key, 0.0) < 1.0 or self._ctrl is None:
            return
        if len(self._touched) > 4 * self.limits.cache_size:
            self._touched.clear()
        self._touched[key] = now
        try:
            self._ctrl.send(wire.Request(wire.TOUCH, key).encode())
        except OSError:
            pass  # a full or broken control socket: the next request finds out

    def _take(self, key: str) -> _Evaluator | None:
        """A warm evaluator for ``key``, or None."""
        pool = self._idle.get(key)
        while pool:
            ev = pool.pop()
            if ev.alive():
                self._idle.move_to_end(key)
                self._touch(key)
                return ev
            self._discard(ev)
        return None

    def _give_back(self, ev: _Evaluator, uses: int = 1) -> None:
        """Keep a healthy evaluator warm, unless it served its uses or the pool is full."""
        ev.uses += uses
        pool = self._idle.setdefault(ev.key, [])
        if ev.uses >= self.limits.evaluator_uses or len(pool) >= self.limits.owner_concurrency:
            self._discard(ev)
            return
        pool.append(ev)
        self._idle.move_to_end(ev.key)
        while len(self._idle) > self.limits.cache_size:
            _, old = self._idle.popitem(last=False)
            for other in old:
                self._discard(other)

    def _refill(self, key: str, spec: bytes) -> None:
        """Start one more evaluator for ``key`` in the background, when it has room."""
        if key in self._refills or self._live.get(key, 0) >= self.limits.owner_concurrency:
            return

        async def refill() -> None:
            ev: _Evaluator | None = None
            ready = False
            try:
                ev = await self._spawn(key, spec)
                ready = await self._started(ev)
            except (OSError, SandboxUnavailable):
                pass
            finally:  # also when cancelled (the sandbox closing): never leak the socket
                self._refills.pop(key, None)
                if ev is not None and not ready:
                    self._discard(ev)
            if ev is None or not ready:
                return
            pool = self._idle.setdefault(key, [])
            pool.append(ev)
            self._idle.move_to_end(key)

        self._refills[key] = asyncio.get_running_loop().create_task(refill())

    async def _started(self, ev: _Evaluator) -> bool:
        """Wait for a new evaluator's first line (its pid, once its zygote has compiled)."""
        loop = asyncio.get_running_loop()
        buf = b""
        try:
            async with asyncio.timeout(2 * self.limits.compile_ms / 1000 + 1):
                while not buf.endswith(b"\n"):
                    chunk = await loop.sock_recv(ev.sock, 64)
                    if not chunk:
                        return False
                    buf += chunk
        except (TimeoutError, OSError):
            return False
        att = Attempt()
        parse_line(buf[:-1].decode("utf-8", "replace"), att, 0.0)
        ev.pid = att.pid
        return ev.pid is not None and b"\n" not in buf[:-1]

    async def _exchange(
        self,
        sock: socket.socket,
        body: bytes,
        deadline: float,
        att: Attempt | None = None,
        rest: Sequence[Attempt] = (),
    ) -> Attempt:
        """Send ``body`` and collect the answer into ``att`` until done, death or ``deadline``.

        The budget is timed from the send (``first_arm``): an evaluator answers once, at
        the end, so queueing and parsing count against the event, never in its favour.
        With ``rest`` (a frame of several envelopes), the lines after each done line go to
        the next attempt, timed from that done line; a death or the deadline lands on the
        attempt being answered then.
        """
        loop = asyncio.get_running_loop()
        att = att or Attempt()
        atts = [att, *rest]
        j, cur = 0, att
        cur.first_arm = loop.time()
        try:
            if body:
                # Never an empty send: a compile sends nothing more, and its zygote may have
                # answered and closed already, when even a zero-byte send fails with EPIPE
                # although the answer waits, complete, in the receive buffer.
                await loop.sock_sendall(sock, body)
            buf = b""
            async with asyncio.timeout_at(deadline):
                while not cur.done and cur.status is None and cur.garbage is None:
                    chunk = await loop.sock_recv(sock, 65536)
                    if not chunk:
                        break
                    buf += chunk
                    *lines, buf = buf.split(b"\n")
                    now = loop.time()
                    for raw in lines:
                        parse_line(raw.decode("utf-8", "replace"), cur, now)
                        if cur.done and j + 1 < len(atts):
                            cur.ended = now
                            j += 1
                            cur = atts[j]
                            cur.first_arm = now
        except TimeoutError:
            if att.pid is not None and not cur.done and cur.status is None:
                try:
                    os.kill(att.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            cur.garbage = HARD_DEADLINE
        except OSError as exc:
            cur.garbage = f"sandbox unreachable: {exc}"
        cur.ended = loop.time()
        return att

    async def _attempt(self, key: str, spec: bytes, body: bytes, deadline: float) -> Attempt:
        """One evaluator's run over a one-envelope ``body`` (see :meth:`_attempts`)."""
        return (await self._attempts(key, spec, body, deadline))[0]

    async def _attempts(
        self, key: str, spec: bytes, body: bytes, deadline: float, count: int = 1
    ) -> list[Attempt]:
        """One evaluator's run over ``body`` (``count`` envelopes): a warm one, or a new one.

        An evaluator that never began the evaluation (a warm one that exited meanwhile, a
        new one whose socket broke before it started) is replaced, up to three times; one
        that began and then failed is the attempt's answer (the policy judges it). Each
        envelope gets its attempt; those after a death are left empty (never began).
        """
        atts = [Attempt(garbage="sandbox unreachable")] + [Attempt() for _ in range(count - 1)]
        for _ in range(3):
            ev = self._take(key)
            fresh = ev is None
            if ev is None:
                try:
                    ev = await self._spawn(key, spec)
                except OSError as exc:  # the fork server or the zygote went away: again
                    atts[0] = Attempt(garbage=f"sandbox unreachable: {exc}")
                    continue
            busy = self._busy.get(key, 0)
            if busy and not self._idle.get(key):
                # deliveries of this rule set overlap: have one more warm for the next. A rule
                # set used one delivery at a time keeps a single evaluator (memory: each one
                # costs a few MiB of the tree's budget).
                self._refill(key, spec)
            self._busy[key] = busy + 1
            # a new evaluator may wait for its zygote's compile: allow for it
            extra = 2 * self.limits.compile_ms / 1000 if fresh else 0.0
            atts = [Attempt(pid=ev.pid)] + [Attempt() for _ in range(count - 1)]
            att, last = atts[0], atts[-1]
            try:
                await self._exchange(ev.sock, body, deadline + extra, att, atts[1:])
            except BaseException:  # cancelled mid-answer: the evaluator is in an unknown state
                if att.pid is not None and not last.done:
                    try:
                        os.kill(att.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                self._discard(ev)
                raise
            finally:
                left = self._busy.get(key, 1) - 1
                if left > 0:
                    self._busy[key] = left
                else:
                    self._busy.pop(key, None)
            ev.pid = att.pid
            self.stats["fresh" if fresh else "warm"] += 1
            if last.done and last.status is None and last.garbage is None:
                self._give_back(ev, count)
                return atts
            self._discard(ev)
            if any(swept_out(a) for a in atts):
                self._go_by_rule(key)
            if _began(att) or att.garbage == HARD_DEADLINE or (fresh and att.status is not None):
                return atts
            # never began: a warm one that had exited meanwhile, or a broken new one
        return atts

    def _go_by_rule(self, key: str) -> None:
        """From now on, ``key``'s deliveries go rule by rule (its sweep ran out or crashed).

        A rule set that ran out once would likely run out again, costing each delivery a
        sweep's time before its rules run one by one. Remembered for as many rule sets as
        the zygote cache holds: one forgotten sweeps once more.
        """
        self._by_rule[key] = None
        self._by_rule.move_to_end(key)
        while len(self._by_rule) > self.limits.cache_size:
            self._by_rule.popitem(last=False)

    # -- requests ----------------------------------------------------------------------------

    async def evaluate(
        self,
        rules: Sequence[tuple[str | None, str]],
        params: dict[str, Any],
        envelope: dict[str, Any] | bytes,
        *,
        owner: str = "",
        scope: str = "",
    ) -> MatchResult:
        """The index of the first rule matching ``envelope`` (or None), plus faults.

        ``envelope`` may come encoded already (:func:`.protocol.encode_envelope`).

        ``owner`` is whose share of the sandbox this takes; ``scope`` (the webhook) keeps
        rule sets apart: two scopes never share a zygote or an evaluator.

        A rule set has one frame in flight at a time; deliveries of it that arrive
        meanwhile (or while their owner's slots are taken) wait together and go in the next
        frame (up to :data:`GROUP_MAX`): one slot, one warm evaluator answering each
        envelope in turn, each under its own alarms and budget, all within
        ``slot_wait_ms`` of waiting. A lone delivery (an idle server) is sent after one
        turn of the loop.
        """
        if not rules:
            return MatchResult(None)
        ids = [rid for rid, _ in rules]
        spec, key = self._spec(scope, [e for _, e in rules], params or {})
        env = envelope if isinstance(envelope, bytes) else wire.encode_envelope(envelope)
        # a webhook has one owner; the owner is in the key anyway, so that a group never
        # rides on another owner's slot whatever a caller passes
        gkey = f"{owner}\0{key}"
        group = self._forming.get(gkey)
        if group is not None and len(group) < GROUP_MAX:
            joined: asyncio.Future[MatchResult] = asyncio.get_running_loop().create_future()
            group.append((env, joined))
            return await joined
        group = [(env, None)]
        self._forming[gkey] = group
        try:
            # one turn of the loop first: deliveries woken with this one (a resolve batch
            # answered together) join its frame, rather than all but it waiting for the next
            await asyncio.sleep(0)
            wait_s = self.limits.slot_wait_ms / 1000
            async with self._hold(
                self._owners, self._slots, owner, wait_s, sandbox_metrics.waited, frame=gkey
            ) as ok:
                self._close(gkey, group)
                if not ok:
                    results = [BUSY] * len(group)
                else:
                    sandbox_metrics.grouped(len(group))
                    began = time.monotonic()
                    try:
                        if len(group) == 1:
                            results = [await self._evaluate(ids, key, spec, env)]
                        else:
                            results = await self._evaluate_many(
                                ids, key, spec, [e for e, _ in group]
                            )
                    finally:
                        for _ in group:
                            sandbox_metrics.evaluated(time.monotonic() - began)
        except BaseException as exc:
            self._close(gkey, group)
            left = [(e, f) for e, f in group[1:] if f is not None and not f.done()]
            if isinstance(exc, asyncio.CancelledError):
                # the first of them gave up (its client went away): the others still get
                # their answers, each evaluated again on its own
                for e, f in left:
                    self._hand_over(rules, params, e, f, owner, scope)
            else:
                for _, f in left:
                    f.set_exception(exc)
            raise
        for (_, joined_f), result in zip(group[1:], results[1:], strict=True):
            if joined_f is not None and not joined_f.done():
                joined_f.set_result(result)
        return results[0]

    def _close(self, key: str, group: list[tuple[bytes, Any]]) -> None:
        """No one joins ``group`` any more (the next delivery starts a group of its own)."""
        if self._forming.get(key) is group:
            del self._forming[key]

    def _hand_over(
        self,
        rules: Sequence[tuple[str | None, str]],
        params: dict[str, Any],
        env: bytes,
        joined: asyncio.Future[MatchResult],
        owner: str,
        scope: str,
    ) -> None:
        task = asyncio.get_running_loop().create_task(
            self.evaluate(rules, params, env, owner=owner, scope=scope)
        )
        self._handed.add(task)

        def done(t: asyncio.Task[MatchResult]) -> None:
            self._handed.discard(t)
            if joined.done():
                return
            if t.cancelled():
                joined.cancel()
            elif t.exception() is not None:
                joined.set_exception(t.exception())  # type: ignore[arg-type]
            else:
                joined.set_result(t.result())

        task.add_done_callback(done)

    async def _evaluate(
        self,
        ids: list[str | None],
        key: str,
        spec: bytes,
        env: bytes,
        attempts: Sequence[Attempt] = (),
    ) -> MatchResult:
        """One envelope once its slots are held, going on from ``attempts`` made already."""
        loop = asyncio.get_running_loop()
        allowance = len(env) * PARSE_S_PER_BYTE
        base = loop.time() + (self.limits.event_ms + self.limits.kill_grace_ms) / 1000
        base += allowance
        tried = list(attempts)
        while True:
            step = judge(ids, tried, rule_ms=self.limits.rule_ms, event_ms=self.limits.event_ms)
            if isinstance(step, MatchResult):
                return step
            sweep = not tried and key not in self._by_rule
            header = wire.EvalHeader(step.start, step.budget_ms, sweep=sweep)
            body = wire.frame(wire.encode_eval(header, env))
            # a sweep that ran out costs the event nothing: the deadline moves on by its time
            deadline = base + sum(a.ran_s for a in tried if swept_out(a))
            tried.append(await self._attempt(key, spec, body, deadline))

    async def _evaluate_many(
        self, ids: list[str | None], key: str, spec: bytes, envs: list[bytes]
    ) -> list[MatchResult]:
        """Several envelopes of one rule set in one frame; each one's budget is its own.

        Each envelope is swept (unless its rule set goes rule by rule). An envelope whose
        evaluator died goes on alone, as :meth:`_evaluate` would: rule by rule from the
        start after a sweep, from the rule after the culprit after a rule's timeout or
        crash; those after it in the frame, never begun, are evaluated alone from the start.
        """
        header = wire.EvalHeader(
            0, self.limits.event_ms, wire.MODE_MANY, sweep=key not in self._by_rule
        )
        atts = await self._frame(key, spec, envs, header, len(envs))
        self.stats["grouped"] += len(envs)
        out = []
        for env, att in zip(envs, atts, strict=True):
            judged = _began(att) or att.garbage == HARD_DEADLINE
            out.append(await self._evaluate(ids, key, spec, env, [att] if judged else ()))
        return out

    async def verdicts(
        self,
        exprs: list[str],
        params: dict[str, Any],
        envelopes: Sequence[bytes],
        *,
        owner: str = "",
        scope: str = "",
        event_ms: float | None = None,
    ) -> list[list[RuleVerdict]]:
        """Every rule's verdict on each encoded envelope (:func:`.protocol.encode_envelope`).

        Many envelopes go to one warm evaluator in one frame (history diffs, lint), under
        the per-rule alarm and an ``event_ms`` budget per envelope (default: the
        configured one). Holds one of ``owner``'s evaluation slots for the whole batch,
        never more, so the owner's live deliveries keep the rest of its share. An
        envelope that kills its evaluator is evaluated again one rule at a time, so the
        rule that timed out or crashed is named and the others still have a verdict.
        Raises :class:`SandboxUnavailable` when no slot comes free in time.
        """
        if not envelopes:
            return []
        if not exprs:
            return [[] for _ in envelopes]
        wait_s = max(self.limits.slot_wait_ms, self.limits.compile_wait_ms) / 1000
        async with self._hold(self._owners, self._slots, owner, wait_s) as ok:
            if not ok:
                raise SandboxUnavailable("the routing sandbox is busy; try again")
            spec, key = self._spec(scope, exprs, params or {})
            budget = float(self.limits.event_ms if event_ms is None else event_ms)
            out: list[list[RuleVerdict]] = []
            k = 0
            while k < len(envelopes):
                batch = envelopes[k:]
                att = await self._verdict_attempt(key, spec, batch, budget, 0, None)
                for chars, errors in att.items:
                    out.append(_verdicts_of(chars, errors, att.compile_errors, 0, budget))
                k += len(att.items)
                if k < len(envelopes) and not att.done:
                    # the envelope that ended the evaluator: again, one rule at a time
                    out.append(
                        await self._one_rule_at_a_time(key, spec, envelopes[k], len(exprs), budget)
                    )
                    k += 1
                elif k < len(envelopes):  # done but short: never expected; do not spin
                    out.extend(
                        [_failed("sandbox answered short")] * len(exprs) for _ in envelopes[k:]
                    )
                    k = len(envelopes)
            return out

    async def _verdict_attempt(
        self,
        key: str,
        spec: bytes,
        batch: Sequence[bytes],
        budget_ms: float,
        start: int,
        only: int | None,
    ) -> Attempt:
        header = wire.EvalHeader(start, budget_ms, wire.MODE_VERDICTS, only)
        return (await self._frame(key, spec, batch, header))[0]

    async def _frame(
        self,
        key: str,
        spec: bytes,
        envs: Sequence[bytes],
        header: wire.EvalHeader,
        count: int = 1,
    ) -> list[Attempt]:
        """One frame of several envelopes, each with ``header.budget_ms`` in turn.

        The hard deadline allows every envelope its budget and its parse, then the grace.
        ``count`` is how many attempts the answer fills (one per envelope in many mode,
        one holding every envelope's verdicts in verdicts mode).
        """
        loop = asyncio.get_running_loop()
        size = sum(len(e) for e in envs)
        deadline = (
            loop.time()
            + (len(envs) * header.budget_ms + self.limits.kill_grace_ms) / 1000
            + size * PARSE_S_PER_BYTE
        )
        body = wire.frame(wire.encode_verdicts_eval(header, list(envs)))
        return await self._attempts(key, spec, body, deadline, count)

    async def _one_rule_at_a_time(
        self, key: str, spec: bytes, envelope: bytes, n: int, budget_ms: float
    ) -> list[RuleVerdict]:
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
                        f" spent before this rule ({self.limits.event_ms} ms)",
                    )
                )
                continue
            att = await self._verdict_attempt(key, spec, [envelope], left, i, i)
            spent += att.ran_s
            if att.items:
                chars, errors = att.items[0]
                out.extend(_verdicts_of(chars, errors, att.compile_errors, i, budget_ms)[:1])
                continue
            if att.armed is not None and att.status == -signal.SIGALRM:
                if att.armed[1] == wire.BUDGET_LIMIT:
                    out.append(
                        RuleVerdict(
                            "error",
                            "budget_exhausted",
                            "the event's budget ran out during this rule",
                        )
                    )
                else:
                    out.append(
                        RuleVerdict("error", "timeout", f"rule exceeded {self.limits.rule_ms} ms")
                    )
            elif att.armed is not None:
                out.append(RuleVerdict("error", "sandbox_failure", describe(att.status)))
            else:
                out.append(_failed(att.garbage or describe(att.status)))
        return out

    async def compile(
        self, exprs: list[str], params: dict[str, Any], *, owner: str = "", scope: str = ""
    ) -> list[tuple[int, str]]:
        """Compile errors by rule index (empty when every expression compiles).

        A rule set that compiles gets a warm evaluator started for ``scope`` at once, so the
        first delivery after a save finds it ready.
        """
        if not exprs:
            return []
        wait_s = self.limits.compile_wait_ms / 1000
        async with self._hold(self._compilers, self._compile_slots, owner, wait_s) as ok:
            if not ok:
                raise SandboxUnavailable("the routing sandbox is busy compiling; try again")
            loop = asyncio.get_running_loop()
            spec, key = self._spec(scope, exprs, params or {})
            limits = self.limits
            # the trials share compile_ms; the zygote's own compile takes as long again
            deadline = loop.time() + (2 * limits.compile_ms + limits.kill_grace_ms) / 1000
            att = Attempt(garbage="sandbox unreachable")
            for _ in range(2):  # once more when the socket broke before the zygote read it
                try:
                    sock = await self._open(wire.COMPILE, key, spec)
                except OSError as exc:
                    att = Attempt(garbage=f"sandbox unreachable: {exc}")
                    continue
                try:
                    att = await self._exchange(sock, b"", deadline)
                finally:
                    sock.close()
                if att.done or not (att.garbage or "").startswith("sandbox unreachable"):
                    break
        if not att.done:
            raise SandboxUnavailable(f"the routing sandbox failed: {att.garbage or 'no answer'}")
        if not att.compile_errors and not self._idle.get(key):
            self._refill(key, spec)
        return sorted(att.compile_errors.items())


#: The verdicts without a message, shared (an envelope has one per rule, a diff thousands).
_PLAIN = {
    wire.VERDICT_MATCH: RuleVerdict("matched"),
    wire.VERDICT_FALSE: RuleVerdict("false"),
    wire.VERDICT_NULL: RuleVerdict("null"),
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
        same = _PLAIN.get(char)
        if same is not None:
            out.append(same)
        elif char == wire.VERDICT_ERROR:
            out.append(RuleVerdict("error", "error", errors.get(i, "error")))
        elif char == wire.VERDICT_COMPILE:
            out.append(RuleVerdict("error", "compile_error", compile_errors.get(i)))
        elif char == wire.VERDICT_BUDGET:
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
