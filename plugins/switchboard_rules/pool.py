"""The sandbox's processes: the fork server it starts, and each rule set's warm evaluators."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import subprocess
import sys
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from . import protocol as proto
from .limits import PARSE_S_PER_BYTE, Limits, SandboxUnavailable
from .policy import Attempt
from .restarts import Restarts
from .resume import HARD_DEADLINE, answered
from .takeup import Takeup, takeup_ms
from .wire import exchange, parse_line

log = logging.getLogger("switchboard.rules")

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


@dataclass(eq=False)
class Evaluator:
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


class Pool:
    """The fork server, and up to ``owner_concurrency`` warm evaluators per rule set.

    Each rule set (per webhook) keeps its warm evaluators here, started from its zygote
    ahead of need (after a save's compile, and whenever overlapping deliveries take its last
    idle one) and reused until one faults, retires after ``evaluator_uses`` evaluations or
    grows past its memory allowance.
    """

    def __init__(self, limits: Limits, *, sweep_ms: int = 0) -> None:
        self.limits = limits
        self._sweep_ms = sweep_ms
        self._proc: subprocess.Popen[bytes] | None = None
        self._ctrl: socket.socket | None = None
        self._lock = asyncio.Lock()
        self._restarts = Restarts(self.start)  #: shared, and spaced out after failures
        # a request is overdue once every wait for it is over (as the fork server's for a
        # zygote's: a delivery's for its new evaluator, a refill's)
        self._takeup = Takeup(takeup_ms(limits) / 1000)
        #: warm evaluators by rule-set key, least recently used first
        self.idle: OrderedDict[str, list[Evaluator]] = OrderedDict()
        self.live: dict[str, int] = {}  #: evaluators started per key and not yet closed
        self.busy: dict[str, int] = {}  #: evaluations in flight per key
        self._touched: dict[str, float] = {}
        self.refills: dict[str, asyncio.Task[None]] = {}
        #: since the pool was created: evaluator processes started, and attempts served by a
        #: warm evaluator or by one started for them (figures for tests and benchmarks)
        self.stats = {"spawned": 0, "warm": 0, "fresh": 0, "grouped": 0}

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
            cfg = proto.ChildConfig(
                memory_bytes=limits.memory_bytes,
                rule_ms=limits.rule_ms,
                compile_ms=limits.compile_ms,
                cache_size=limits.cache_size,
                parse_s_per_byte=PARSE_S_PER_BYTE,
                sweep_ms=self._sweep_ms,
                ruleset_bytes=limits.ruleset_mib * 2**20,
                budget_bytes=limits.memory_budget_mib * 2**20,
                # an evaluator may grow by a quarter of its cap before it is replaced
                retire_bytes=limits.memory_bytes // 4,
                # a zygote is broken once every wait for its first word is over: a delivery's
                # for its new evaluator (event and grace, then the compile), a refill's
                takeup_ms=takeup_ms(limits),
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
            except BaseException:  # cancelled (the sandbox closing): no half-started server
                self._reset()
                raise
            if hello != proto.READY:
                self._reset()
                raise SandboxUnavailable("the routing sandbox did not start")

    def _reset(self) -> None:
        for task in self.refills.values():
            task.cancel()
        self.refills.clear()
        for pool in self.idle.values():
            for ev in pool:
                ev.sock.close()
        self.idle.clear()
        self.live.clear()
        self.busy.clear()
        self._touched.clear()
        self._takeup.clear()
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
        self._restarts.cancel()
        async with self._lock:
            for task in self.refills.values():
                task.cancel()
            for pool in self.idle.values():
                for ev in pool:
                    ev.sock.close()  # EOF: each evaluator exits
            self.idle.clear()
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
        if self._takeup.overdue(self._ctrl):
            async with self._lock:  # one judge at a time; the others find it settled
                late = await self._takeup.stuck(self._ctrl)
                if late:
                    # Stopped (SIGSTOP) or hung, it would hold every new evaluator and
                    # compile (each waiting out its deadline) for as long as it stays so:
                    # killed with everything under it (SIGKILL reaches a stopped process).
                    log.warning(
                        "rules sandbox: the fork server took up no request for %.1f s"
                        " (stopped or hung): killed, and a new one started",
                        late,
                    )
                    self._reset()
        if self._proc is None or self._proc.poll() is not None or self._ctrl is None:
            await self._restarts.wait()
        if self._ctrl is None:
            raise SandboxUnavailable("the routing sandbox did not start")
        return self._ctrl

    async def open(self, op: str, key: str, spec: bytes) -> socket.socket:
        """A request socket to ``key``'s zygote (started by the fork server when needed)."""
        loop = asyncio.get_running_loop()
        request = proto.Request(op, key).encode()
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            mine.setblocking(False)
            for retry in (True, False):
                ctrl = await self._ctrl_socket()
                try:
                    socket.send_fds(ctrl, [request], [theirs.fileno()])
                    self._takeup.sent()
                    break
                except OSError:
                    async with self._lock:
                        self._reset()
                    if not retry:
                        raise
            await loop.sock_sendall(mine, proto.frame(spec))
        except BaseException:
            mine.close()
            raise
        finally:
            theirs.close()
        return mine

    async def _spawn(self, key: str, spec: bytes) -> Evaluator:
        sock = await self.open(proto.SPAWN, key, spec)
        self.live[key] = self.live.get(key, 0) + 1
        self.stats["spawned"] += 1
        return Evaluator(key, sock)

    def _discard(self, ev: Evaluator) -> None:
        ev.sock.close()
        left = self.live.get(ev.key, 1) - 1
        if left > 0:
            self.live[ev.key] = left
        else:
            self.live.pop(ev.key, None)

    def _touch(self, key: str) -> None:
        """Tell the fork server ``key`` is in use (at most once a second per key)."""
        now = asyncio.get_running_loop().time()
        if now - self._touched.get(key, 0.0) < 1.0 or self._ctrl is None:
            return
        if len(self._touched) > 4 * self.limits.cache_size:
            self._touched.clear()
        self._touched[key] = now
        try:
            self._ctrl.send(proto.Request(proto.TOUCH, key).encode())
        except OSError:
            pass  # a full or broken control socket: the next request finds out

    def _take(self, key: str) -> Evaluator | None:
        """A warm evaluator for ``key``, or None."""
        pool = self.idle.get(key)
        while pool:
            ev = pool.pop()
            if ev.alive():
                self.idle.move_to_end(key)
                self._touch(key)
                return ev
            self._discard(ev)
        return None

    def _give_back(self, ev: Evaluator, uses: int = 1) -> None:
        """Keep a healthy evaluator warm, unless it served its uses or the pool is full."""
        ev.uses += uses
        pool = self.idle.setdefault(ev.key, [])
        if ev.uses >= self.limits.evaluator_uses or len(pool) >= self.limits.owner_concurrency:
            self._discard(ev)
            return
        pool.append(ev)
        self.idle.move_to_end(ev.key)
        while len(self.idle) > self.limits.cache_size:
            _, old = self.idle.popitem(last=False)
            for other in old:
                self._discard(other)

    def refill(self, key: str, spec: bytes) -> None:
        """Start one more evaluator for ``key`` in the background, when it has room."""
        if key in self.refills or self.live.get(key, 0) >= self.limits.owner_concurrency:
            return

        async def refill() -> None:
            ev: Evaluator | None = None
            ready = False
            try:
                ev = await self._spawn(key, spec)
                ready = await self._started(ev)
            except (OSError, SandboxUnavailable):
                pass
            finally:  # also when cancelled (the sandbox closing): never leak the socket
                self.refills.pop(key, None)
                if ev is not None and not ready:
                    self._discard(ev)
            if ev is None or not ready:
                return
            pool = self.idle.setdefault(key, [])
            pool.append(ev)
            self.idle.move_to_end(key)

        self.refills[key] = asyncio.get_running_loop().create_task(refill())

    async def _started(self, ev: Evaluator) -> bool:
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

    async def attempts(
        self, key: str, spec: bytes, body: bytes, deadline: float, count: int = 1
    ) -> list[Attempt]:
        """One evaluator's run over ``body`` (``count`` envelopes): a warm one, or a new one.

        An evaluator that never began the evaluation (a warm one that exited meanwhile, a
        new one whose socket broke before it started) is replaced, up to three times; one
        that began and then failed is the attempt's answer (the policy judges it). Each
        envelope gets its attempt; those after a death are left empty (never began).
        """
        atts: list[Attempt] = []
        for _ in range(3):
            ev = self._take(key)
            fresh = ev is None
            if ev is None:
                try:
                    # the fork server's (re)start, when it needs one, counts against the
                    # deadline: it may take seconds, or hang
                    async with asyncio.timeout_at(deadline):
                        ev = await self._spawn(key, spec)
                except (TimeoutError, SandboxUnavailable) as exc:  # never (re)started in time
                    garbage = HARD_DEADLINE if isinstance(exc, TimeoutError) else str(exc)
                    return [Attempt(garbage=garbage)] + [Attempt() for _ in range(count - 1)]
                except OSError as exc:  # the fork server or the zygote went away: again
                    atts = [Attempt(garbage=f"sandbox unreachable: {exc}")]
                    atts += [Attempt() for _ in range(count - 1)]
                    continue
            busy = self.busy.get(key, 0)
            if busy and not self.idle.get(key):
                # deliveries of this rule set overlap: have one more warm for the next. A rule
                # set used one delivery at a time keeps a single evaluator (memory: each one
                # costs a few MiB of the tree's budget).
                self.refill(key, spec)
            self.busy[key] = busy + 1
            # a new evaluator may wait for its zygote's compile: allow for it
            extra = 2 * self.limits.compile_ms / 1000 if fresh else 0.0
            atts = [Attempt(pid=ev.pid)] + [Attempt() for _ in range(count - 1)]
            att, last = atts[0], atts[-1]
            try:
                await exchange(ev.sock, body, deadline + extra, att, atts[1:])
            except BaseException:  # cancelled mid-answer: the evaluator is in an unknown state
                if att.pid is not None and not last.done:
                    try:
                        os.kill(att.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                self._discard(ev)
                raise
            finally:
                left = self.busy.get(key, 1) - 1
                if left > 0:
                    self.busy[key] = left
                else:
                    self.busy.pop(key, None)
            ev.pid = att.pid
            self.stats["fresh" if fresh else "warm"] += 1
            if last.done and last.status is None and last.garbage is None:
                self._give_back(ev, count)
                return atts
            self._discard(ev)
            if answered(att, fresh=fresh):
                return atts
            # never began: a warm one that had exited meanwhile, or a broken new one
        return atts  # each of the three tries made its own
