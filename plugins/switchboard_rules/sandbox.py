"""Run tenant jq rules out of process: a fork server, one zygote per rule set, a child per event.

This module is the server's side, and its face: :class:`Sandbox` evaluates and compiles rule
sets through the sandbox's mechanisms, one a module, each private to it:

- :mod:`.limits`: the configured :class:`Limits` and :class:`SandboxUnavailable`;
- :mod:`.pool`: the fork server (:mod:`.sandbox_child`) and each rule set's warm evaluators;
- :mod:`.scheduler`: slots and owners' shares, one frame in flight per rule set, budgets;
- :mod:`.wire`: the client side of :mod:`.protocol` (a frame out, report lines folded into
  an :class:`Attempt`);
- :mod:`.resume`: which attempts there are (pure); :func:`.policy.judge` decides what
  they mean;
- :mod:`.history`: every rule's verdict on many envelopes (:meth:`Sandbox.verdicts`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from switchboard.plugin import MatchResult, RuleVerdict

from . import history
from . import protocol as proto
from .limits import PARSE_S_PER_BYTE, Limits, SandboxUnavailable
from .policy import Attempt
from .pool import Pool
from .resume import HARD_DEADLINE
from .scheduler import GROUP_MAX, Scheduler
from .wire import exchange, parse_line

__all__ = [
    "GROUP_MAX",
    "HARD_DEADLINE",
    "PARSE_S_PER_BYTE",
    "Attempt",
    "Limits",
    "RuleSetRef",
    "Sandbox",
    "SandboxUnavailable",
    "parse_line",
]


@dataclass(frozen=True)
class RuleSetRef:
    """A rule set as the sandbox evaluates it: each rule's id, its canonical bytes and its
    zygote's key (:meth:`Sandbox.rule_set`; a caller evaluating one rule set for many
    deliveries keeps it rather than having it worked out again each time)."""

    ids: tuple[str | None, ...]
    spec: bytes
    key: str


class Sandbox:
    """Evaluates and compiles rule sets in isolated, resource-capped child processes.

    Fairness (:class:`.scheduler.Scheduler`): an evaluation holds one of its owner's
    ``owner_concurrency`` slots and one of the ``max_concurrency`` slots of everyone, so one
    owner's slow or faulting rules never hold more than its share; compiles have slots of
    their own. Speed (:class:`.pool.Pool`): each rule set (per webhook) keeps up to
    ``owner_concurrency`` warm evaluators, started ahead of need and reused.

    ``sweep_ms`` is for tests: a sweep's alarm in place of one rule's (``rule_ms``), so that
    a test's sweep runs out, or not, whatever this machine's speed.
    """

    def __init__(self, limits: Limits, *, sweep_ms: int = 0) -> None:
        self.limits = limits
        self._pool = Pool(limits, sweep_ms=sweep_ms)
        self._scheduler = Scheduler(limits, self._pool)
        self._specs: dict[tuple[str, tuple[str, ...], str], tuple[bytes, str]] = {}
        #: since the sandbox was created: evaluator processes started, and attempts served by a
        #: warm evaluator or by one started for them (figures for tests and benchmarks)
        self.stats = self._pool.stats

    @staticmethod
    def key(scope: str, spec: bytes) -> str:
        """A rule set's zygote: the same rules of two webhooks never share one."""
        return hashlib.sha256(scope.encode() + b"\0" + spec).hexdigest()

    def _spec(self, scope: str, exprs: list[str], params: dict[str, Any]) -> tuple[bytes, str]:
        """A rule set's canonical bytes and key (remembered: every delivery asks again)."""
        memo = (scope, tuple(exprs), json.dumps(params, sort_keys=True) if params else "")
        found = self._specs.get(memo)
        if found is None:
            spec = proto.encode_spec(exprs, params)
            found = self._specs[memo] = (spec, self.key(scope, spec))
            if len(self._specs) > 2 * self.limits.cache_size:
                del self._specs[next(iter(self._specs))]  # the oldest remembered
        return found

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """The fork server's pid (None when not running)."""
        return self._pool.pid

    async def start(self) -> None:
        """Start the fork server (a no-op when it is already running)."""
        await self._pool.start()

    async def close(self) -> None:
        """Stop the fork server and every zygote and evaluator under it."""
        await self._pool.close()

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
        env = envelope if isinstance(envelope, bytes) else proto.encode_envelope(envelope)
        return await self.evaluate_rule_set(self.rule_set(rules, params, scope=scope), env, owner)

    def rule_set(
        self, rules: Sequence[tuple[str | None, str]], params: dict[str, Any], *, scope: str = ""
    ) -> RuleSetRef:
        """``rules`` (``(id, expr)`` pairs, at least one) with ``params``, in ``scope``."""
        spec, key = self._spec(scope, [e for _, e in rules], params or {})
        return RuleSetRef(tuple(rid for rid, _ in rules), spec, key)

    async def evaluate_rule_set(self, ref: RuleSetRef, env: bytes, owner: str = "") -> MatchResult:
        """:meth:`evaluate` of the encoded ``env`` by a rule set from :meth:`rule_set`."""
        return await self._scheduler.evaluate(ref.ids, ref.key, ref.spec, env, owner)

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
        async with self._scheduler.evaluation_slot(owner, wait_s) as ok:
            if not ok:
                raise SandboxUnavailable("the routing sandbox is busy; try again")
            spec, key = self._spec(scope, exprs, params or {})
            budget = float(self.limits.event_ms if event_ms is None else event_ms)
            return await history.verdicts(self._scheduler, key, spec, envelopes, len(exprs), budget)

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
        async with self._scheduler.compile_slot(owner, wait_s) as ok:
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
                    # the fork server's (re)start, when it needs one, counts against the
                    # deadline too: it may hang (then it goes on, shared, for later requests)
                    async with asyncio.timeout_at(deadline):
                        sock = await self._pool.open(proto.COMPILE, key, spec)
                except TimeoutError:
                    att = Attempt(garbage=HARD_DEADLINE)
                    break
                except OSError as exc:
                    att = Attempt(garbage=f"sandbox unreachable: {exc}")
                    continue
                try:
                    att = await exchange(sock, b"", deadline)
                finally:
                    sock.close()
                if att.done or not (att.garbage or "").startswith("sandbox unreachable"):
                    break
        if not att.done:
            raise SandboxUnavailable(f"the routing sandbox failed: {att.garbage or 'no answer'}")
        if not att.compile_errors and not self._pool.idle.get(key):
            self._pool.refill(key, spec)
        return sorted(att.compile_errors.items())
