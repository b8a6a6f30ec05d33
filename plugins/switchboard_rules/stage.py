"""The ``rules`` routing stage: evaluate in the sandbox, decide in the server."""

from __future__ import annotations

import gc
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter, methodcaller
from typing import Any, TypeVar

from switchboard.plugin import (
    MatchResult,
    RoutingConfig,
    RoutingContext,
    RuleVerdict,
    StageResult,
    decide,
    rule_error,
)

from . import protocol as wire
from . import sandbox_metrics
from .direct import Defer, Evaluate, compile_rules, first_match
from .history import PLAIN
from .jqscan import forbidden_names, wrapper_names
from .reads import cut, project, rule_set_reads, trie_of
from .sandbox import Limits, RuleSetRef, Sandbox

log = logging.getLogger("switchboard.rules")

#: ``[plugins.rules]``: the operator's limits. The only place their defaults are written.
#: Counts and budgets are per server worker (each worker has its own sandbox tree).
CONFIG_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        # evaluations running at once, all owners together
        "max_concurrency": {"type": "integer", "minimum": 1, "maximum": 256, "default": 8},
        # evaluations one owner (human) may run at once: their share
        "owner_concurrency": {"type": "integer", "minimum": 1, "maximum": 256, "default": 2},
        # how long a delivery waits for its slots before routing by the default (sandbox_busy)
        "slot_wait_ms": {"type": "integer", "minimum": 0, "maximum": 60000, "default": 1000},
        # compiles (saves, dry runs) at once, one per owner; never an evaluation's slot
        "compile_concurrency": {"type": "integer", "minimum": 1, "maximum": 64, "default": 2},
        "compile_wait_ms": {"type": "integer", "minimum": 0, "maximum": 60000, "default": 5000},
        # address space of each zygote and evaluator
        "memory_mib": {"type": "integer", "minimum": 32, "maximum": 4096, "default": 128},
        # the most one compiled rule set may take: a larger one is refused at save
        "ruleset_mib": {"type": "integer", "minimum": 1, "maximum": 1024, "default": 16},
        # the sandbox tree's memory (PSS): least recently used rule sets are evicted beyond
        "memory_budget_mib": {"type": "integer", "minimum": 64, "maximum": 65536, "default": 512},
        "rule_ms": {"type": "integer", "minimum": 1, "maximum": 10000, "default": 50},
        "event_ms": {"type": "integer", "minimum": 1, "maximum": 60000, "default": 250},
        "kill_grace_ms": {"type": "integer", "minimum": 100, "maximum": 60000, "default": 1750},
        # zygotes kept, one per rule set and webhook
        "cache_size": {"type": "integer", "minimum": 1, "maximum": 4096, "default": 64},
        # a rule set's whole compile (every trial together)
        "compile_ms": {"type": "integer", "minimum": 10, "maximum": 60000, "default": 1000},
        # evaluations a warm evaluator serves before it is replaced
        "evaluator_uses": {"type": "integer", "minimum": 1, "maximum": 1000000, "default": 1000},
        # history dry runs (diff_webhook_rules, lint_webhook_rules, `rules diff|lint`): the
        # most stored events one call evaluates, and how long it may run before it answers
        # with what it has (and a cursor to go on from)
        "history_max_events": {
            "type": "integer",
            "minimum": 1,
            "maximum": 1000000,
            "default": 10000,
        },
        "history_deadline_s": {"type": "number", "minimum": 0.1, "maximum": 3600, "default": 30},
        # decide in the server a live delivery whose rules are all simple (comparisons of
        # fields with literals, startswith, contains, length: direct.py), where jq's answer is
        # certain; false: every delivery goes to the sandbox
        "direct": {"type": "boolean", "default": True},
    },
}

DEFAULTS: dict[str, Any] = {k: v["default"] for k, v in CONFIG_SCHEMA["properties"].items()}


def _reads_of(configs: Sequence[RoutingConfig]) -> frozenset[tuple[str, ...]] | None:
    """The envelope paths the rules of all ``configs`` read (None: the whole envelope)."""
    return rule_set_reads(tuple(sorted({r["expr"] for c in configs for r in c.rules})))


def _encoded(envelope: dict[str, Any], paths: frozenset[tuple[str, ...]] | None) -> bytes:
    """``envelope`` as the sandbox reads it, cut to ``paths`` (None: all of it)."""
    return wire.encode_envelope(envelope if paths is None else project(envelope, paths))


_EXPR = itemgetter("expr")
_ID = methodcaller("get", "id")

_NULL, _FALSE, _MATCHED = (
    PLAIN[wire.VERDICT_NULL],
    PLAIN[wire.VERDICT_FALSE],
    PLAIN[wire.VERDICT_MATCH],
)


def _said(value: Any) -> RuleVerdict:
    """A rule's verdict when the server decided it (direct.py): by its one output."""
    if value is None:
        return _NULL
    return _FALSE if value is False else _MATCHED


@dataclass(frozen=True)
class _Judged:
    """An envelope every rule of a dry run's configs was decided for in the server: each
    config's verdicts, as :meth:`RulesStage.verdicts` answers them (the sandbox's form of
    the envelope is then never built)."""

    verdicts: tuple[list[RuleVerdict], ...]


def _judge(direct: Sequence[tuple[Evaluate, ...]], envelope: dict[str, Any]) -> _Judged:
    """Every rule's verdict per config; :class:`.direct.Defer` when any is jq's to give."""
    return _Judged(tuple([_said(fn(envelope)) for fn in fns] for fns in direct))


@dataclass
class _Prepared:
    """What every delivery to one rule set needs of it, worked out once."""

    ref: RuleSetRef
    #: what of the envelope the sandbox is sent (:func:`.reads.trie_of`; None: all of it)
    trie: dict[str, Any] | None
    whole: bool  # no proof of what the rules read: the whole envelope goes
    #: every rule compiled to be decided in the server (direct.py; None: the sandbox's,
    #: and from the first time deciding them here failed or was slow: see :func:`_here`)
    direct: tuple[Evaluate, ...] | None


#: The CPU one event's rules may take to be decided in the server (~0.1 ms at most for
#: 1,024 tokens of comparisons, a few µs a usual regex): past it (hostile regexes), the
#: answer stands but that rule set is the sandbox's from then on, whose budget charges
#: its owner. CPU of this thread, so a preempted worker does not count it.
DIRECT_CPU_MAX_S = 0.001

_T = TypeVar("_T")
#: The outcomes of :func:`_here` after which the rules are no longer decided in the server.
_DISTRUST = frozenset({"failed", "slow"})


def _here(evaluate: Callable[[], _T], what: Callable[[], str]) -> tuple[bool, _T | None, str]:
    """``evaluate()`` in the server: (whether its answer stands, the answer, how it went).

    How it went: ``decided`` (the answer stands), ``deferred`` (jq's to give: the
    sandbox's), ``failed`` (it raised something else: a bug of ours, never the tenant's,
    logged with its traceback) or ``slow`` (it took past :data:`DIRECT_CPU_MAX_S`, logged;
    its answer stands, unless it deferred). After ``failed`` or ``slow`` the caller hands
    ``what()`` it was deciding to the sandbox for good, so each is logged once.
    """
    young, start = gc.get_count()[0], time.thread_time()
    stands, answer = True, None
    try:
        answer = evaluate()
    except Defer:
        stands = False
    except Exception:
        log.exception("rules decided in the server raised (%s): the sandbox decides them", what())
        return False, None, "failed"
    spent = time.thread_time() - start
    # A garbage collection that fell in the evaluation (its young count started over:
    # ~3 ms for ~10,000 objects, gctune.py) is the whole worker's cost, not the rules'.
    if spent > DIRECT_CPU_MAX_S and gc.get_count()[0] >= young:
        log.warning(
            "rules decided in the server took %.1f ms of CPU for one event (%s): the sandbox"
            " decides them from now on",
            spent * 1000,
            what(),
        )
        return stands, answer, "slow"
    return stands, answer, "decided" if stands else "deferred"


def tenant(webhook: Mapping[str, Any]) -> tuple[str, str]:
    """(owner, scope): whose share of the sandbox, and which rule sets may share processes."""
    return str(webhook.get("owner_human") or ""), str(webhook.get("id") or "")


class RulesStage:
    """First match wins over the webhook's saved rules; no rules never touches a process."""

    name = "rules"
    #: what ``trace["stage"]`` says when a rule decides (STAGE_RULE, as stored traces say)
    trace_name = "rule"

    def __init__(self, settings: dict[str, Any] | None = None) -> None:
        self.settings: dict[str, Any] = {**DEFAULTS, **(settings or {})}
        self._sandbox: Sandbox | None = None
        self._prepared: OrderedDict[tuple[Any, ...], _Prepared] = OrderedDict()
        self.history_max_events = int(self.settings["history_max_events"])
        self.history_deadline_s = float(self.settings["history_deadline_s"])

    @property
    def sandbox(self) -> Sandbox:
        """The sandbox (created on first use; its fork server starts on first request)."""
        if self._sandbox is None:
            self._sandbox = Sandbox(Limits.from_config(self.settings))
        return self._sandbox

    async def close(self) -> None:
        if self._sandbox is not None:
            await self._sandbox.close()
            self._sandbox = None

    async def validate(
        self, config: RoutingConfig, *, webhook: Mapping[str, Any] | None = None
    ) -> None:
        """Refuse forbidden builtins, then compile every expression in the sandbox.

        The compile is charged to the webhook's owner and leaves a warm evaluator for it.
        """
        for index, rule in enumerate(config.rules):
            bad = forbidden_names(rule["expr"])
            if bad:
                raise rule_error(
                    index, rule, "forbidden_function", f"expression uses forbidden {', '.join(bad)}"
                )
            hidden = wrapper_names(rule["expr"])
            if hidden:
                raise rule_error(
                    index,
                    rule,
                    "invalid_expression",
                    f"expression does not compile: {', '.join(hidden)} is not defined"
                    " (names starting with $__ belong to the sandbox, not to rules)",
                )
        if not config.rules:
            return
        owner, scope = tenant(webhook or {})
        errors = await self.sandbox.compile(
            [r["expr"] for r in config.rules], dict(config.params), owner=owner, scope=scope
        )
        if errors:
            index, message = min(errors)
            raise rule_error(
                index,
                config.rules[index],
                "invalid_expression",
                f"expression does not compile: {message}",
            )

    async def route(self, ctx: RoutingContext) -> StageResult:
        rules = ctx.config.rules
        if not rules:
            return StageResult()
        owner, scope = tenant(ctx.webhook)
        prepared = self._prepare(rules, ctx.config.params, scope)
        direct = prepared.direct
        if direct is not None:
            stands, index, outcome = _here(
                lambda: first_match(direct, ctx.envelope),
                lambda: f"webhook {ctx.webhook.get('id')}, a live delivery",
            )
            sandbox_metrics.direct(outcome)
            if outcome in _DISTRUST:
                prepared.direct = None  # this rule set's deliveries go to the sandbox
            if stands:
                if index is None:
                    return StageResult()
                return StageResult(decide(ctx.config, MatchResult(index), ctx.grant))
        # only the paths the rules can read reach the sandbox (reads.py proves it, or the
        # whole envelope goes): parsing a big payload costs more than the rules themselves
        trie = prepared.trie
        envelope = wire.encode_envelope(ctx.envelope if trie is None else cut(ctx.envelope, trie))
        sandbox_metrics.sent(len(envelope), "whole" if prepared.whole else "paths")
        match: MatchResult = await self.sandbox.evaluate_rule_set(prepared.ref, envelope, owner)
        if match.rule_index is None:
            # No match: later stages (LLM triage) or the default decide; faults carry on.
            return StageResult(None, match.faults)
        return StageResult(decide(ctx.config, match, ctx.grant))

    def _prepare(
        self, rules: Sequence[Mapping[str, Any]], params: Mapping[str, Any], scope: str
    ) -> _Prepared:
        """``rules`` with ``params`` in ``scope``, as :meth:`route` evaluates them
        (remembered: a webhook's every delivery asks again, with a config of its own)."""
        exprs = tuple(map(_EXPR, rules))
        ids = tuple(map(_ID, rules))
        memo = (scope, exprs, ids, json.dumps(params, sort_keys=True) if params else "")
        found = self._prepared.get(memo)
        if found is not None:
            self._prepared.move_to_end(memo)
            return found
        paths = rule_set_reads(exprs)
        ref = self.sandbox.rule_set(list(zip(ids, exprs, strict=True)), dict(params), scope=scope)
        trie = None if paths is None else trie_of(paths)
        direct = compile_rules(exprs) if self.settings["direct"] else None
        found = self._prepared[memo] = _Prepared(ref, trie, paths is None, direct)
        while len(self._prepared) > 2 * self.sandbox.limits.cache_size:
            self._prepared.popitem(last=False)
        return found

    def prepare(self, envelope: dict[str, Any]) -> bytes:
        """The envelope as the sandbox reads it (:meth:`verdicts` takes it in its place)."""
        return _encoded(envelope, None)

    def preparer(
        self, configs: Sequence[RoutingConfig]
    ) -> Callable[[dict[str, Any]], bytes | _Judged]:
        """:meth:`prepare` for evaluating ``configs``: only what their rules can read; and
        where every rule of theirs is decided in the server (``direct``, as live routing
        decides them), the verdicts themselves, unless the envelope needs jq's answer."""
        paths = _reads_of(configs)
        direct = self._direct(configs)
        if direct is None:
            return lambda envelope: _encoded(envelope, paths)

        trusted = [True]

        def prepare(envelope: dict[str, Any]) -> bytes | _Judged:
            if trusted[0]:
                stands, judged, outcome = _here(
                    lambda: _judge(direct, envelope), lambda: "a dry run"
                )
                if outcome in _DISTRUST:
                    trusted[0] = False  # the rest of this dry run goes to the sandbox
                if stands and judged is not None:
                    return judged
            return _encoded(envelope, paths)

        return prepare

    def _direct(self, configs: Sequence[RoutingConfig]) -> list[tuple[Evaluate, ...]] | None:
        """Each config's rules compiled to be decided in the server, or None (any is not)."""
        if not self.settings["direct"]:
            return None
        out = []
        for config in configs:
            compiled = compile_rules(tuple(map(_EXPR, config.rules)))
            if compiled is None:
                return None
            out.append(compiled)
        return out

    async def verdicts(
        self,
        configs: Sequence[RoutingConfig],
        envelopes: Sequence[dict[str, Any] | bytes | _Judged],
        *,
        webhook: Mapping[str, Any],
    ) -> list[tuple[list[RuleVerdict], ...]]:
        """Every rule's verdict per config on each envelope, all configs in one pass.

        Where every rule of the configs is one the server decides (``direct``), an envelope
        is judged here as live routing judges it, and only those that need jq's answer go
        to the sandbox. There, configs sharing their params are evaluated as one rule set
        (each distinct expression once: a candidate that changes one rule costs one extra
        rule, not a second pass), with one event budget per config in it; each envelope is
        encoded once (or was, by :meth:`prepare` or :meth:`preparer`).
        """
        forms: list[bytes | _Judged] = []
        prepare = None  # built for the first envelope not prepared yet (history prepares)
        for envelope in envelopes:
            if isinstance(envelope, dict):
                prepare = prepare or self.preparer(configs)
                forms.append(prepare(envelope))
            else:
                forms.append(envelope)
        encoded = [f for f in forms if not isinstance(f, _Judged)]
        found = iter(await self._in_sandbox(configs, encoded, webhook) if encoded else ())
        return [f.verdicts if isinstance(f, _Judged) else next(found) for f in forms]

    async def _in_sandbox(
        self, configs: Sequence[RoutingConfig], encoded: list[bytes], webhook: Mapping[str, Any]
    ) -> list[tuple[list[RuleVerdict], ...]]:
        owner, scope = tenant(webhook)
        groups: dict[str, tuple[dict[str, Any], list[str], dict[str, int], int]] = {}
        where: list[tuple[str, list[int]]] = []
        for config in configs:
            pkey = json.dumps(config.params, sort_keys=True)
            params, exprs, seen, uses = groups.get(pkey) or (dict(config.params), [], {}, 0)
            positions = []
            for rule in config.rules:
                expr = rule["expr"]
                if expr not in seen:
                    seen[expr] = len(exprs)
                    exprs.append(expr)
                positions.append(seen[expr])
            groups[pkey] = (params, exprs, seen, uses + (1 if config.rules else 0))
            where.append((pkey, positions))
        answers: dict[str, list[list[RuleVerdict]]] = {}
        for pkey, (params, exprs, _, uses) in groups.items():
            answers[pkey] = await self.sandbox.verdicts(
                exprs,
                params,
                encoded,
                owner=owner,
                scope=scope,
                event_ms=self.settings["event_ms"] * max(uses, 1),
            )
        return [
            tuple([answers[pkey][k][p] for p in positions] for pkey, positions in where)
            for k in range(len(encoded))
        ]
