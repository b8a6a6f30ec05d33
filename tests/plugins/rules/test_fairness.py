"""Noisy neighbours: one owner's slow rules or compile bombs never degrade another owner."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from sbsandbox import sandbox
from switchboard_rules.sandbox import Sandbox, SandboxUnavailable

from switchboard.routing.model import MatchResult

pytestmark = pytest.mark.anyio

ENV: dict[str, Any] = {"source": "gitea", "kind": "issues", "payload": {"n": 7}, "size": 10}
#: The quiet owner's rules: a drop-like first rule that must keep deciding.
QUIET: list[tuple[str | None, str]] = [("drop-bots", '.kind == "issues"'), ("b", "true")]
#: A slow rule: each one runs until its rule_ms alarm kills the evaluator.
SLOW: list[tuple[str | None, str]] = [(f"s{i}", "until(false; .)") for i in range(32)]
#: A compile bomb: libjq folds these constants at compile time (the issue's case).
BOMB = " and ".join(['(("x" * 2e7) == ("x" * 2e7))'] * 150)


async def quiet_owner(sb: Sandbox, n: int) -> list[MatchResult]:
    """The other tenant's deliveries, one after another, while the noisy one runs."""
    out = []
    for _ in range(n):
        out.append(await sb.evaluate(QUIET, {}, ENV, owner="quiet", scope="quiet-hook"))
        await asyncio.sleep(0.01)
    return out


@pytest.mark.slow
async def test_slow_rules_at_32_connections_degrade_only_their_owner() -> None:
    async with sandbox() as sb:
        assert await sb.evaluate(QUIET, {}, ENV, owner="quiet", scope="quiet-hook") == MatchResult(
            0
        )
        stop = asyncio.Event()
        noisy: list[MatchResult] = []

        async def connection() -> None:
            while not stop.is_set():
                noisy.append(await sb.evaluate(SLOW, {}, ENV, owner="noisy", scope="noisy-hook"))

        flood = [asyncio.create_task(connection()) for _ in range(32)]
        await asyncio.sleep(0.3)  # the flood is on: the noisy owner's share is taken
        try:
            quiet = await quiet_owner(sb, 40)
        finally:
            stop.set()
            await asyncio.gather(*flood)
    assert quiet == [MatchResult(0)] * 40  # 0 of the quiet owner's deliveries degraded
    # the noisy owner did run (and fault) meanwhile, and was held to its own share
    causes = {f.cause for r in noisy for f in r.faults}
    assert "timeout" in causes and "sandbox_busy" in causes


@pytest.mark.slow
async def test_without_shares_the_same_flood_would_degrade_the_quiet_owner() -> None:
    """The control: one shared pool of two slots (the old sandbox) lets the flood through.

    The flood comes through two of the noisy owner's webhooks: a rule set has one frame in
    flight at a time, so one webhook alone would leave the second slot free.
    """
    async with sandbox(max_concurrency=2, owner_concurrency=2, slot_wait_ms=200) as sb:
        stop = asyncio.Event()

        async def connection(k: int) -> None:
            while not stop.is_set():
                await sb.evaluate(SLOW, {}, ENV, owner="noisy", scope=f"noisy-hook-{k % 2}")

        flood = [asyncio.create_task(connection(k)) for k in range(32)]
        await asyncio.sleep(0.3)
        try:
            quiet = await quiet_owner(sb, 10)
        finally:
            stop.set()
            await asyncio.gather(*flood)
    assert any(r != MatchResult(0) for r in quiet)


async def test_compile_bombs_in_dry_runs_take_no_live_capacity_and_one_deadline() -> None:
    async with sandbox() as sb:
        assert await sb.compile([e for _, e in QUIET], {}, owner="quiet", scope="quiet-hook") == []
        bomb = [BOMB + f" and .n == {i}" for i in range(32)]

        async def dry_run(i: int) -> tuple[float, list[tuple[int, str]]]:
            started = time.monotonic()
            try:
                errors = await sb.compile(bomb, {"i": i}, owner="noisy", scope=f"noisy-{i}")
            except SandboxUnavailable as exc:  # its own second compile may wait too long
                errors = [(-1, str(exc))]
            return time.monotonic() - started, errors

        bombs = asyncio.gather(*(dry_run(i) for i in range(2)))
        await asyncio.sleep(0.1)
        quiet = await quiet_owner(sb, 30)
        # the quiet owner can still save while the noisy one compiles
        saved = await sb.compile(["true", '.kind == "push"'], {}, owner="quiet", scope="quiet-hook")
        results = await bombs
    assert quiet == [MatchResult(0)] * 30
    assert saved == []
    for elapsed, errors in results:
        assert [i for i, _ in errors] in ([-1], list(range(32)))
        # one deadline for the whole set (compile_ms, 1 s), not one per rule (32 s and more)
        assert elapsed < 8, elapsed
    assert any(errors != [(-1, errors[0][1])] for _, errors in results)
