"""The sandbox's fairness: slots and shares, one frame in flight per rule set, and budgets."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from switchboard.plugin import MatchResult

from . import protocol as proto
from . import sandbox_metrics
from .limits import PARSE_S_PER_BYTE, Limits
from .policy import BUSY, Attempt, clean, judge, swept_out
from .pool import Pool
from .resume import carried, sweeps, swept_s

#: The most deliveries of one rule set evaluated in one frame (those that arrived while its
#: last frame was out or its owner's slots were taken). Bounds how long the last waits
#: behind the others: at worst each of them spends its whole ``event_ms``. Eight: once the
#: program got cheaper (verdicts as jq values, no start test per rule) a frame of eight
#: takes less than the server saves by writing and answering them together
#: (bench/routing.py, alternating runs: 8 clients 0.78-0.82 of plain against 0.74-0.78 with
#: frames of four, 32 clients 0.91-0.99 against 0.83-0.92; with the old program it was the
#: other way round, and a cap of four won).
GROUP_MAX = 8


@dataclass
class Shares:
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


class Scheduler:
    """Which evaluation runs when, in which frame, with what budget.

    Fairness: an evaluation holds one of its owner's ``owner_concurrency`` slots and one of
    the ``max_concurrency`` slots of everyone, taken in that order, so one owner's slow or
    faulting rules wait in that owner's queue and never hold more than its share. Compiles
    (saves and dry runs) have their own ``compile_concurrency`` slots, one per owner at a
    time: they never take an evaluation's.

    A rule set has one frame in flight at a time; deliveries of it that arrive meanwhile (or
    while their owner's slots are taken) wait together and go in the next frame (up to
    :data:`GROUP_MAX`): one slot, one warm evaluator answering each envelope in turn, each
    under its own alarms and budget, all within ``slot_wait_ms`` of waiting. A lone delivery
    (an idle server) is sent after one turn of the loop.
    """

    def __init__(self, limits: Limits, pool: Pool) -> None:
        self.limits = limits
        self.pool = pool
        self._slots = asyncio.Semaphore(limits.max_concurrency)
        self._owners = Shares(limits.owner_concurrency)
        self._compile_slots = asyncio.Semaphore(limits.compile_concurrency)
        self._compilers = Shares(1)
        self._frames = Shares(1)  #: one evaluation frame in flight per rule set
        #: rule sets whose sweep ran out of time or crashed: they go rule by rule
        self.by_rule: OrderedDict[str, None] = OrderedDict()
        #: deliveries of one rule set waiting for their owner's slot together, by key
        self._forming: dict[str, list[tuple[bytes, asyncio.Future[MatchResult] | None]]] = {}
        self._handed: set[asyncio.Task[MatchResult]] = set()

    # -- slots -----------------------------------------------------------------------------

    def evaluation_slot(
        self,
        owner: str,
        wait_s: float,
        *,
        on_wait: Callable[[float, bool], None] | None = None,
        frame: str | None = None,
    ) -> AbstractAsyncContextManager[bool]:
        """One of ``owner``'s evaluation slots, then everyone's (see :meth:`_hold`)."""
        return self._hold(self._owners, self._slots, owner, wait_s, on_wait, frame)

    def compile_slot(self, owner: str, wait_s: float) -> AbstractAsyncContextManager[bool]:
        """``owner``'s one compile slot, then one of everyone's (see :meth:`_hold`)."""
        return self._hold(self._compilers, self._compile_slots, owner, wait_s)

    @asynccontextmanager
    async def _hold(
        self,
        shares: Shares,
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

    # -- frames ------------------------------------------------------------------------------

    async def evaluate(
        self, ids: Sequence[str | None], key: str, spec: bytes, env: bytes, owner: str
    ) -> MatchResult:
        """The first of ``key``'s rules (``ids``) matching the encoded ``env``, plus faults.

        Evaluated in the rule set's next frame, on one of ``owner``'s slots (see the class).
        """
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
            async with self.evaluation_slot(
                owner, wait_s, on_wait=sandbox_metrics.waited, frame=gkey
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
                    self._hand_over(ids, key, spec, e, f, owner)
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
        ids: Sequence[str | None],
        key: str,
        spec: bytes,
        env: bytes,
        joined: asyncio.Future[MatchResult],
        owner: str,
    ) -> None:
        """``env`` evaluated again on its own, its answer going to ``joined``."""
        task = asyncio.get_running_loop().create_task(self.evaluate(ids, key, spec, env, owner))
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
        ids: Sequence[str | None],
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
            sweep = sweeps(tried, by_rule=key in self.by_rule)
            header = proto.EvalHeader(step.start, step.budget_ms, sweep=sweep)
            body = proto.frame(proto.encode_eval(header, env))
            # a sweep that ran out costs the event nothing: the deadline moves on by its time
            deadline = base + swept_s(tried)
            att = (await self._attempts(key, spec, body, deadline))[0]
            if not tried and (answer := clean(att)) is not None:
                return answer
            tried.append(att)

    async def _evaluate_many(
        self, ids: Sequence[str | None], key: str, spec: bytes, envs: list[bytes]
    ) -> list[MatchResult]:
        """Several envelopes of one rule set in one frame; each one's budget is its own.

        Each envelope is swept (unless its rule set goes rule by rule). An envelope whose
        evaluator died goes on alone, as :meth:`_evaluate` would: rule by rule from the
        start after a sweep, from the rule after the culprit after a rule's timeout or
        crash; those after it in the frame, never begun, are evaluated alone from the start.
        """
        sweep = sweeps((), by_rule=key in self.by_rule)
        header = proto.EvalHeader(0, self.limits.event_ms, proto.MODE_MANY, sweep=sweep)
        atts = await self.frame(key, spec, envs, header, len(envs))
        self.pool.stats["grouped"] += len(envs)
        out = []
        for env, att in zip(envs, atts, strict=True):
            answer = clean(att)
            if answer is None:
                answer = await self._evaluate(ids, key, spec, env, [att] if carried(att) else ())
            out.append(answer)
        return out

    async def frame(
        self,
        key: str,
        spec: bytes,
        envs: Sequence[bytes],
        header: proto.EvalHeader,
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
        body = proto.frame(proto.encode_verdicts_eval(header, list(envs)))
        return await self._attempts(key, spec, body, deadline, count)

    async def _attempts(
        self, key: str, spec: bytes, body: bytes, deadline: float, count: int = 1
    ) -> list[Attempt]:
        """The pool's run of one evaluator over ``body``; a sweep that ran out (its alarm or a
        crash) has its rule set go rule by rule from then on."""
        atts = await self.pool.attempts(key, spec, body, deadline, count)
        if any(swept_out(a) for a in atts):
            self._go_by_rule(key)
        return atts

    def _go_by_rule(self, key: str) -> None:
        """From now on, ``key``'s deliveries go rule by rule (its sweep ran out or crashed).

        A rule set that ran out once would likely run out again, costing each delivery a
        sweep's time before its rules run one by one. Remembered for as many rule sets as
        the zygote cache holds: one forgotten sweeps once more.
        """
        self.by_rule[key] = None
        self.by_rule.move_to_end(key)
        while len(self.by_rule) > self.limits.cache_size:
            self.by_rule.popitem(last=False)
