"""Bounded memory: compiled rule sets have a size limit, the tree a budget, hostile rules no leak."""

from __future__ import annotations

import asyncio
from typing import Any

import psutil
import pytest
from sbsandbox import sandbox
from switchboard_rules.sandbox_child import tree_pss
from switchboard_rules.stage import RulesStage

from switchboard.errors import RuleValidationError
from switchboard.routing.config import validate_config
from switchboard.routing.model import MatchResult

pytestmark = pytest.mark.anyio

ENV: dict[str, Any] = {"source": "gitea", "kind": "push", "payload": {"n": 7}, "size": 10}
MIB = 2**20


def big(mib: float, tag: int = 0) -> str:
    """A rule whose compiled form holds a ``mib`` MiB constant (libjq folds it)."""
    return f'("a" * {int(mib * MIB)}) == .kind or .payload.n == {tag}'


async def test_a_compiled_rule_set_over_its_limit_is_refused_naming_the_limit() -> None:
    async with sandbox() as sb:
        errors = await sb.compile([".kind == 1", big(44), "true"], {})
        assert [i for i, _ in errors] == [1]
        assert "over the sandbox's limit of 16 MiB ([plugins.rules] ruleset_mib)" in errors[0][1]
        # each under the limit, together over it: the set as a whole is refused
        together = await sb.compile([big(5, i) for i in range(4)], {})
        assert [i for i, _ in together] == [0, 1, 2, 3]
        assert all("the compiled rule set as a whole takes" in m for _, m in together)
        assert await sb.compile([big(5, i) for i in range(2)], {}) == []
        # at delivery time (a set saved under a larger limit): that rule faults, the next runs
        result = await sb.evaluate([("big", big(44)), ("t", "true")], {}, ENV)
        assert result.rule_index == 1
        assert [(f.rule_index, f.cause) for f in result.faults] == [(0, "compile_error")]


async def test_a_save_is_refused_with_a_clear_error() -> None:
    stage = RulesStage({"ruleset_mib": 8})
    try:
        config = {
            "rules": [
                {"id": "ok", "expr": "true", "action": {"queue": "inbox"}},
                {"id": "bomb", "expr": big(12), "action": {"queue": "inbox"}},
            ]
        }
        with pytest.raises(RuleValidationError) as err:
            await validate_config(config, None, [stage], {"id": "w", "owner_human": "h"})
    finally:
        await stage.close()
    assert err.value.code == "invalid_expression"
    assert "over the sandbox's limit of 8 MiB ([plugins.rules] ruleset_mib)" in str(err.value)
    assert err.value.rule_id == "bomb" and err.value.index == 1


async def test_the_tree_stays_within_its_memory_budget() -> None:
    budget = 96
    async with sandbox(memory_budget_mib=budget, ruleset_mib=32, cache_size=64) as sb:
        assert sb.pid is not None
        for i in range(10):  # ten webhooks, each holding a 12 MiB rule set
            result = await sb.evaluate(
                [("big", big(12, 100 + i)), ("t", "true")], {}, ENV, scope=f"w{i}"
            )
            assert result == MatchResult(1)
        # measured every 0.5 s while anything changed, and evicted down to the budget: as
        # soon as this machine lets the evicted zygotes exit (a loaded one takes longer)
        total = tree_pss(sb.pid)
        async with asyncio.timeout(60):
            while total > budget * MIB:
                await asyncio.sleep(0.1)
                total = tree_pss(sb.pid)
        assert total <= budget * MIB, total / MIB
        # an evicted rule set comes back on its next delivery, as it was
        result = await sb.evaluate([("big", big(12, 100)), ("t", "true")], {}, ENV, scope="w0")
        assert result == MatchResult(1)


HOSTILE = [
    'reduce range(40) as $i ("x"; . + .) | length > 0',  # memory doubling: the cap
    "def f: [f]; f",  # infinite recursion
    '"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!" | test("^(a+)+$")',  # regex
    "last(range(1e12)) > 0",  # a long loop
    ".source * 3e7 | length > 0",  # crashes its evaluator
]


def held_past_its_alarm(result: MatchResult) -> bool:
    """A benign rule timed out: its alarm is wall time (``ITIMER_REAL``), and a machine
    busy with other tests can hold a fresh evaluator past 20 ms before ``true`` finishes.
    Such a delivery is evaluated once more: this test is about memory, not time."""
    return any(f.cause == "timeout" and f.rule_id in ("ok", "t") for f in result.faults)


@pytest.mark.slow
async def test_memory_is_flat_over_many_hostile_deliveries() -> None:
    me = psutil.Process()
    # The event deadline is generous: this test is about memory, and on a loaded machine
    # replacing a killed evaluator can take longer than a tight budget would leave rule "t".
    async with sandbox(rule_ms=20, event_ms=2000) as sb:
        assert sb.pid is not None

        async def deliveries(n: int) -> None:
            for k in range(n):
                expr = HOSTILE[k % len(HOSTILE)]
                rules = [("ok", "false"), ("bad", expr), ("t", "true")]
                result = await sb.evaluate(rules, {}, ENV, owner="h", scope="w")
                if held_past_its_alarm(result):
                    result = await sb.evaluate(rules, {}, ENV, owner="h", scope="w")
                assert result.rule_index == 2, (expr, result)
                assert [(f.rule_index, f.rule_id) for f in result.faults] == [(1, "bad")], expr

        await deliveries(50)
        server, tree = me.memory_info().rss, tree_pss(sb.pid)
        await deliveries(250)
        grew_server, grew_tree = me.memory_info().rss - server, tree_pss(sb.pid) - tree
    assert grew_server < 16 * MIB, grew_server / MIB
    assert grew_tree < 32 * MIB, grew_tree / MIB
