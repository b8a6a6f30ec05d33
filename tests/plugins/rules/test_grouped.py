"""Concurrent deliveries of one rule set share a slot and a frame; each keeps its own answer."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sbsandbox import sandbox
from switchboard_rules.sandbox import GROUP_MAX, Sandbox

from switchboard.routing.model import MatchResult

pytestmark = pytest.mark.anyio

CRASH = ".source * 3e7 | length > 0"  # kills its evaluator (SIGABRT under the memory cap)
SLOW = "last(range(1e12)) > 0"
#: What the tests that are not about giving up allow: the longest wait for a slot and an
#: event's budget, neither of which starting evaluators on a loaded machine ever spends, so
#: a rule that runs out runs out of its own rule_ms (an alarm), never of these.
WAIT = {"slot_wait_ms": 60_000, "event_ms": 20_000}
RULES: list[tuple[str | None, str]] = [
    ("one", ".payload.n == 1"),
    ("two", '.payload.n | if . == 2 then error("two") elif . == 3 then null else false end'),
    ("slow", f".payload.n == 4 and ({SLOW})"),
    ("crash", f".payload.n == 5 and ({CRASH})"),
    ("big", ".payload.n >= 3"),
]


def env(n: int) -> dict[str, Any]:
    return {"source": "gitea", "kind": "push", "payload": {"n": n}}


def shape(result: MatchResult) -> tuple[int | None, list[tuple[int, str, str | None]]]:
    return result.rule_index, [(f.rule_index, f.cause, f.rule_id) for f in result.faults]


EXPECTED = {
    0: (None, []),
    1: (0, []),
    2: (None, [(1, "error", "two")]),
    3: (4, []),
    4: (4, [(2, "timeout", "slow")]),  # timed out inside the frame: the rules after it ran
    5: (4, [(3, "sandbox_failure", "crash")]),  # died inside the frame: named, then on
    6: (4, []),
    7: (4, []),
}


async def busy_slot(sb: Sandbox) -> asyncio.Task[MatchResult]:
    """Hold the owner's only slot with another rule set for a while: the next arrivals group."""
    task = asyncio.ensure_future(
        sb.evaluate([("hold", f"({SLOW}) and false")], {}, env(0), owner="h", scope="other")
    )
    await asyncio.sleep(0.01)
    return task


async def test_deliveries_waiting_together_are_answered_each_as_if_alone() -> None:
    async with sandbox(owner_concurrency=1, rule_ms=60, **WAIT) as sb:
        alone = {
            n: shape(await sb.evaluate(RULES, {}, env(n), owner="h", scope="w")) for n in EXPECTED
        }
        assert alone == EXPECTED
        assert sb.stats["grouped"] == 0  # one at a time: never grouped
        hold = await busy_slot(sb)
        order = [6, 4, 0, 1, 5, 2, 7, 3]  # the faults land mid-frame, with envelopes after
        results = await asyncio.gather(
            *(sb.evaluate(RULES, {}, env(n), owner="h", scope="w") for n in order)
        )
        await hold
        assert {n: shape(r) for n, r in zip(order, results, strict=True)} == EXPECTED
        assert sb.stats["grouped"] == len(order)  # frames of GROUP_MAX took all eight


async def test_deliveries_arriving_together_on_an_idle_sandbox_share_one_frame() -> None:
    """Woken in one turn of the loop (a resolve batch answered together), they go in one
    frame, not the first alone and the rest after it."""
    async with sandbox() as sb:
        await sb.evaluate(RULES, {}, env(0), owner="h", scope="w")  # warm, and never grouped
        assert sb.stats["grouped"] == 0
        ns = [0, 1, 3, 6]
        results = await asyncio.gather(
            *(sb.evaluate(RULES, {}, env(n), owner="h", scope="w") for n in ns)
        )
        assert [shape(r) for r in results] == [EXPECTED[n] for n in ns]
        assert sb.stats["grouped"] == len(ns)


async def test_a_group_is_capped_and_later_arrivals_form_the_next() -> None:
    from prometheus_client import REGISTRY

    def frames() -> tuple[float, float, float]:
        def get(suffix: str, **labels: str) -> float:
            name = f"switchboard_sandbox_group_size_{suffix}"
            return REGISTRY.get_sample_value(name, labels) or 0.0

        return get("count"), get("sum"), get("bucket", le="1.0")

    before = frames()
    async with sandbox(owner_concurrency=1, **WAIT) as sb:
        hold = await busy_slot(sb)
        n = 2 * GROUP_MAX + GROUP_MAX // 2
        results = await asyncio.gather(
            *(sb.evaluate(RULES[:2], {}, env(k % 2), owner="h", scope="w") for k in range(n))
        )
        await hold
        assert [r.rule_index for r in results] == [None, 0] * (n // 2)
        # the first waiter's group took GROUP_MAX; the rest grouped behind it (full, then half)
        assert sb.stats["grouped"] == n
    count, total, alone = (a - b for a, b in zip(frames(), before, strict=True))
    assert (count, total, alone) == (4, n + 1, 1)  # the hold went alone; then three frames


async def test_webhooks_with_the_same_rules_never_share_a_frame() -> None:
    async with sandbox(owner_concurrency=1, **WAIT) as sb:
        hold = await busy_slot(sb)
        results = await asyncio.gather(
            *(sb.evaluate(RULES[:1], {}, env(1), owner="h", scope=f"w{k % 2}") for k in range(6))
        )
        await hold
        assert all(r == MatchResult(0) for r in results)
        assert sb.stats["grouped"] == 6  # two groups of three, one per webhook


async def test_the_others_are_answered_when_the_first_of_a_group_gives_up() -> None:
    async with sandbox(owner_concurrency=1, **WAIT) as sb:
        hold = await busy_slot(sb)
        first = asyncio.ensure_future(sb.evaluate(RULES, {}, env(1), owner="h", scope="w"))
        await asyncio.sleep(0.01)  # it waits for the slot: the group's first
        others = [
            asyncio.ensure_future(sb.evaluate(RULES, {}, env(n), owner="h", scope="w"))
            for n in (3, 2, 0)
        ]
        await asyncio.sleep(0.01)
        first.cancel()  # its client went away
        await hold
        assert [shape(await t) for t in others] == [EXPECTED[3], EXPECTED[2], EXPECTED[0]]
        with pytest.raises(asyncio.CancelledError):
            await first


async def test_a_group_that_waits_too_long_is_busy_together() -> None:
    async with sandbox(owner_concurrency=1, slot_wait_ms=50) as sb:
        hold = await busy_slot(sb)
        results = await asyncio.gather(
            *(sb.evaluate(RULES, {}, env(n), owner="h", scope="w") for n in range(3))
        )
        await hold
        assert [[f.cause for f in r.faults] for r in results] == [["sandbox_busy"]] * 3


async def test_one_frame_per_rule_set_in_flight_and_the_next_takes_the_rest() -> None:
    """Slots to spare, yet what arrives while a frame is out waits for it and goes together."""
    async with sandbox(owner_concurrency=2, rule_ms=60, **WAIT) as sb:
        first = asyncio.ensure_future(sb.evaluate(RULES, {}, env(4), owner="h", scope="w"))
        await asyncio.sleep(0.01)  # its frame is out: rule "slow" runs to its alarm
        ended: list[int] = []
        first.add_done_callback(lambda _: ended.append(4))
        rest = [6, 0, 1, 5, 2, 7, 3]
        tasks = [
            asyncio.ensure_future(sb.evaluate(RULES, {}, env(n), owner="h", scope="w"))
            for n in rest
        ]
        for n, task in zip(rest, tasks, strict=True):
            task.add_done_callback(lambda _, n=n: ended.append(n))
        results = await asyncio.gather(*tasks)
        assert shape(await first) == EXPECTED[4]
        assert {n: shape(r) for n, r in zip(rest, results, strict=True)} == {
            n: EXPECTED[n] for n in rest
        }
        # none of the rest (fast rules) ended before the slow first: no frame beside it
        assert ended[0] == 4
        assert sb.stats["grouped"] == len(rest)  # in frames after the first, never alone


async def test_two_owners_never_share_a_frame_even_for_one_scope() -> None:
    async with sandbox(rule_ms=60, **WAIT) as sb:
        firsts = [
            asyncio.ensure_future(sb.evaluate(RULES, {}, env(4), owner=o, scope="w"))
            for o in ("a", "b")
        ]
        await asyncio.sleep(0.01)  # each owner's first frame is out
        results = await asyncio.gather(
            *(
                sb.evaluate(RULES, {}, env(n), owner=o, scope="w")
                for o in ("a", "b")
                for n in (1, 3)
            )
        )
        assert [shape(await f) for f in firsts] == [EXPECTED[4]] * 2
        assert [shape(r) for r in results] == [EXPECTED[1], EXPECTED[3]] * 2
        assert sb.stats["grouped"] == 4  # two frames of two, one per owner
