"""Warm evaluators: started ahead of need, reused, never shared between webhooks, replaced."""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

import psutil
import pytest
from sbsandbox import sandbox
from switchboard_rules.sandbox import Sandbox

from switchboard.routing.model import MatchResult

pytestmark = pytest.mark.anyio

ENV: dict[str, Any] = {"source": "gitea", "kind": "push", "payload": {"n": 7}, "size": 10}
RULES: list[tuple[str | None, str]] = [("a", '.kind == "issues"'), ("b", ".payload.n == 7")]


def tree(sb: Sandbox) -> dict[int, list[int]]:
    """Each zygote's pid and its evaluators' pids (trial children are gone by then).

    Zombies are gone already: they wait only for their parent's next reaping round.
    """
    assert sb.pid is not None

    def live(procs: list[psutil.Process]) -> list[psutil.Process]:
        out = []
        for p in procs:
            try:
                if p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
            except psutil.NoSuchProcess:
                pass
        return out

    return {
        z.pid: sorted(e.pid for e in live(z.children()))
        for z in live(psutil.Process(sb.pid).children())
    }


async def until(condition: Any, what: str) -> None:
    """Wait until ``condition()`` holds (what a loaded machine takes, up to a minute)."""
    async with asyncio.timeout(60):
        while not condition():
            await asyncio.sleep(0.01)
    assert condition(), what


async def settle(sb: Sandbox) -> None:
    """Wait for background refills to finish starting their evaluators."""
    for _ in range(200):
        if not sb._pool.refills:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)


async def test_evaluations_reuse_warm_evaluators_and_start_no_process() -> None:
    async with sandbox() as sb:
        assert await sb.evaluate(RULES, {}, ENV, owner="h", scope="w") == MatchResult(1)
        await settle(sb)
        before, spawned = tree(sb), sb.stats["spawned"]
        for n in range(100):
            env = {**ENV, "payload": {"n": n}}
            expected = MatchResult(1) if n == 7 else MatchResult(None)
            assert await sb.evaluate(RULES, {}, env, owner="h", scope="w") == expected
        assert sb.stats["spawned"] == spawned  # not one process started for 100 deliveries
        assert tree(sb) == before  # the same zygote, the same evaluators
        assert sb.stats["warm"] >= 100


async def test_a_compile_leaves_a_warm_evaluator_for_the_first_delivery() -> None:
    async with sandbox() as sb:
        assert await sb.compile([e for _, e in RULES], {}, owner="h", scope="w") == []
        await settle(sb)
        assert sb.stats == {"spawned": 1, "warm": 0, "fresh": 0, "grouped": 0}
        assert await sb.evaluate(RULES, {}, ENV, owner="h", scope="w") == MatchResult(1)
        assert sb.stats["warm"] == 1 and sb.stats["fresh"] == 0


async def test_two_webhooks_with_the_same_rules_never_share_a_process() -> None:
    async with sandbox() as sb:
        for scope in ("w1", "w2", "w1", "w2"):
            assert await sb.evaluate(RULES, {}, ENV, owner="h", scope=scope) == MatchResult(1)
        await settle(sb)
        zygotes = tree(sb)
        assert len(zygotes) == 2  # one per webhook, though the rule sets are identical
        first, second = zygotes.values()
        assert first and second and not set(first) & set(second)


async def test_a_changed_rule_set_answers_on_the_very_next_evaluation() -> None:
    async with sandbox() as sb:
        for _ in range(3):
            assert await sb.evaluate(RULES, {}, ENV, scope="w") == MatchResult(1)
            changed = [("a", '.kind == "push"'), *RULES[1:]]
            assert await sb.evaluate(changed, {}, ENV, scope="w") == MatchResult(0)
            assert await sb.evaluate(RULES[:1], {}, ENV, scope="w") == MatchResult(None)
            params = [("p", "$params.n == .payload.n")]
            assert await sb.evaluate(params, {"n": 7}, ENV, scope="w") == MatchResult(0)
            assert await sb.evaluate(params, {"n": 8}, ENV, scope="w") == MatchResult(None)


async def test_an_evaluator_retires_after_its_uses() -> None:
    async with sandbox(evaluator_uses=3) as sb:
        for _ in range(12):
            assert await sb.evaluate(RULES, {}, ENV, scope="w") == MatchResult(1)
        # each evaluator served at most 3: at least 4 were started
        assert sb.stats["spawned"] >= 4


async def test_evaluators_killed_while_idle_are_replaced_without_a_fault() -> None:
    async with sandbox() as sb:
        assert await sb.evaluate(RULES, {}, ENV, scope="w") == MatchResult(1)
        await settle(sb)
        for evaluators in tree(sb).values():
            for pid in evaluators:
                os.kill(pid, signal.SIGKILL)
        await asyncio.sleep(0.1)
        assert await sb.evaluate(RULES, {}, ENV, scope="w") == MatchResult(1)


async def test_evicted_rule_sets_come_back_without_a_fault() -> None:
    async with sandbox(cache_size=1) as sb:
        for scope in ("w1", "w2", "w1", "w3", "w2", "w1"):
            assert await sb.evaluate(RULES, {}, ENV, scope=scope) == MatchResult(1)
        await settle(sb)
        # the evicted zygotes and their evaluators go, as soon as this machine lets them
        await until(lambda: len(tree(sb)) == 1, "one zygote left")


async def test_a_timeout_replaces_only_its_own_evaluator() -> None:
    # an event budget that starting evaluators here never spends: the slow rule runs out of
    # its own rule_ms, and the next rule always has its turn
    async with sandbox(rule_ms=20, event_ms=20_000) as sb:
        assert await sb.evaluate(RULES, {}, ENV, scope="quiet") == MatchResult(1)
        await settle(sb)
        quiet = tree(sb)
        slow = [("slow", "last(range(1e12)) > 0"), ("ok", "true")]
        result = await sb.evaluate(slow, {}, ENV, scope="slow")
        assert result.rule_index == 1 and [f.cause for f in result.faults] == ["timeout"]
        after = tree(sb)
        for zygote, evaluators in quiet.items():
            assert after[zygote] == evaluators  # the other webhook's evaluators untouched


async def test_a_cancelled_delivery_leaves_no_evaluator_behind() -> None:
    """The producer hung up mid-evaluation: its evaluator is killed, the next one is clean."""
    async with sandbox(rule_ms=5000, event_ms=10000) as sb:
        slow = [("slow", "last(range(1e12)) > 0"), ("ok", "true")]
        assert await sb.evaluate(RULES, {}, ENV, scope="w") == MatchResult(1)
        await settle(sb)
        task = asyncio.create_task(sb.evaluate(slow, {}, ENV, scope="w2"))
        _, key = sb._spec("w2", [e for _, e in slow], {})
        await until(lambda: sb._pool.busy.get(key), "the slow rule set is being evaluated")
        await asyncio.sleep(0.1)  # its frame is out (and its evaluator spins, or soon will)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.3)
        busy = [
            p
            for p in psutil.Process(sb.pid).children(recursive=True)
            if p.status() == psutil.STATUS_RUNNING
        ]
        assert busy == []  # nothing still spinning on the abandoned rule
        for _ in range(3):
            assert await sb.evaluate(RULES, {}, ENV, scope="w") == MatchResult(1)
        await settle(sb)
        # counted out: what is left for that rule set is exactly its warm, idle evaluators
        assert sb._pool.live.get(key, 0) == len(sb._pool.idle.get(key, []))
