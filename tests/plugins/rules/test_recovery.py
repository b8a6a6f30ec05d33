"""The sandbox recovers by itself: a frozen zygote replaced, fork-server restarts spaced out.

Real faults on real processes (SIGSTOP, SIGKILL, a fork server that dies or stops itself at
start): what a delivery or a compile gets meanwhile is bounded, and once the fault is dealt
with (or over) the rule set is served again.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from sbfaults import frozen
from sbsandbox import sandbox
from switchboard_rules.restarts import Backoff
from switchboard_rules.sandbox import Sandbox, SandboxUnavailable

from switchboard.plugin import MatchResult

pytestmark = [pytest.mark.anyio, pytest.mark.slow]  # real faults: the slow envs run them

RULES: list[tuple[str | None, str]] = [("a", '.kind == "issues"'), ("b", ".payload.n == 7")]
ENV: dict[str, Any] = {"source": "gitea", "kind": "push", "payload": {"n": 7}, "size": 10}
FAILED = [(-1, "sandbox_failure")]
#: A fork server that stops itself (SIGSTOP) before it is ready: a start that hangs.
STOP_SELF = "import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)\n"


def faults(result: MatchResult) -> list[tuple[int, str]]:
    return [(f.rule_index, f.cause) for f in result.faults]


def zygotes(sb: Sandbox) -> list[psutil.Process]:
    """The fork server's live children (its zygotes, and any orphan not yet reaped)."""
    assert sb.pid is not None
    return [p for p in psutil.Process(sb.pid).children() if p.status() != psutil.STATUS_ZOMBIE]


def kill_fork_server(sb: Sandbox) -> None:
    """SIGKILL the fork server; its zygotes and evaluators die with it (PDEATHSIG)."""
    assert sb.pid is not None
    tree = [psutil.Process(sb.pid), *psutil.Process(sb.pid).children(recursive=True)]
    os.kill(sb.pid, signal.SIGKILL)
    _, alive = psutil.wait_procs(tree, timeout=10)
    assert alive == []


# -- a frozen zygote ---------------------------------------------------------------------------


async def test_a_frozen_zygote_is_killed_and_its_rule_set_gets_a_new_one() -> None:
    """A rule set's zygote frozen (SIGSTOP) while its deliveries need new evaluators: the
    delivery waiting on it gets a bounded answer; the fork server kills the zygote once its
    request is overdue, and the next delivery gets a new zygote and matches (each delivery
    once waited 4 s for ``sandbox_failure``, for as long as the zygote stayed stopped).
    Continuing the old one afterwards finds nothing to continue: nothing is left behind."""
    async with sandbox(kill_grace_ms=500, evaluator_uses=1) as sb:  # a new evaluator each time
        assert (await sb.evaluate(RULES, {}, ENV)).rule_index == 1
        (zygote,) = zygotes(sb)
        with frozen(zygote):
            result = await asyncio.wait_for(sb.evaluate(RULES, {}, ENV), 30)
            # the fault at its deadline, or the match (when the kill came first: tried again)
            assert result.rule_index == 1 or faults(result) == FAILED, result
            result = await asyncio.wait_for(sb.evaluate(RULES, {}, ENV), 30)
            assert result.rule_index == 1, result
            gone, _ = psutil.wait_procs([zygote], timeout=10)  # killed, and reaped
            assert gone == [zygote]
            (replaced,) = zygotes(sb)
            assert replaced.pid != zygote.pid
        assert (await sb.evaluate(RULES, {}, ENV)).rule_index == 1
        assert [p.pid for p in zygotes(sb)] == [replaced.pid]
        stopped = [p for p in zygotes(sb) if p.status() == psutil.STATUS_STOPPED]
        assert stopped == []


async def test_a_frozen_fork_server_is_killed_and_a_new_one_serves(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The fork server frozen (SIGSTOP) while deliveries need new evaluators: the delivery
    whose request it never took up gets a bounded answer; once that request is overdue the
    next delivery kills it (with everything under it) and is served by a new one. Each such
    delivery once waited out its deadline for ``sandbox_failure``, for as long as the fork
    server stayed stopped. Continuing it afterwards finds nothing to continue."""
    async with sandbox(kill_grace_ms=500, evaluator_uses=1) as sb:  # a new evaluator each time
        assert (await sb.evaluate(RULES, {}, ENV)).rule_index == 1
        assert sb.pid is not None
        first = psutil.Process(sb.pid)
        under = first.children(recursive=True)
        with frozen(first):
            result = await asyncio.wait_for(sb.evaluate(RULES, {}, ENV), 30)
            # the fault at its deadline, or the match (when the kill came first: tried again)
            assert result.rule_index == 1 or faults(result) == FAILED, result
            result = await _until_matched(sb, 20)
            assert result.rule_index == 1, result
            assert sb.pid is not None and sb.pid != first.pid
            _, alive = psutil.wait_procs([first, *under], timeout=10)  # killed, and reaped
            assert alive == []
        assert (await sb.evaluate(RULES, {}, ENV)).rule_index == 1
        assert psutil.Process(sb.pid).status() != psutil.STATUS_STOPPED
    said = [r.getMessage() for r in caplog.records if "fork server took up no" in r.getMessage()]
    assert len(said) == 1, said


# -- the fork server's restarts ------------------------------------------------------------------


def test_the_restart_backoff_doubles_up_to_its_cap_and_a_start_resets_it() -> None:
    backoff = Backoff()
    waits = []
    for _ in range(6):
        backoff.failed(100.0)
        waits.append(backoff.until - 100.0)
    assert waits == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    backoff.succeeded()
    assert (backoff.failures, backoff.until) == (0, 0.0)
    backoff.failed(7.0)
    assert backoff.until == 7.5


async def _until_matched(sb: Sandbox, within_s: float) -> MatchResult:
    """Deliveries, a little apart, until one matches (or ``within_s`` has passed)."""
    until = time.monotonic() + within_s
    while True:
        result = await asyncio.wait_for(sb.evaluate(RULES, {}, ENV), 30)
        if result.rule_index == 1 or time.monotonic() > until:
            return result
        await asyncio.sleep(0.2)


async def test_a_fork_server_dying_at_each_start_is_not_started_again_by_every_delivery(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The fork server killed, and every replacement dying at start: deliveries in a row get
    ``sandbox_failure`` without each starting one more (each once did: eight deliveries,
    eight starts). Once a replacement can start, a delivery after the backoff is served."""
    from switchboard_rules import pool

    starts = tmp_path / "starts"
    good = pool._BOOTSTRAP
    dying = f"open({str(starts)!r}, 'a').write('start\\n')\nraise SystemExit(3)\n"
    async with sandbox(kill_grace_ms=500) as sb:
        assert (await sb.evaluate(RULES, {}, ENV)).rule_index == 1
        monkeypatch.setattr(pool, "_BOOTSTRAP", dying + good)
        kill_fork_server(sb)
        for _ in range(8):
            result = await asyncio.wait_for(sb.evaluate(RULES, {}, ENV), 30)
            assert faults(result) == FAILED, result
        # one start, a second only if this loop took longer than the first backoff (0.5 s),
        # a third only if longer than the first two (1.5 s): never one per delivery
        assert 1 <= len(starts.read_text().split()) <= 3
        monkeypatch.setattr(pool, "_BOOTSTRAP", good)
        result = await _until_matched(sb, 20)  # the backoff is capped at 5 s
        assert result.rule_index == 1, result
        # started: the backoff is over, and a fork server killed now is started at once
        kill_fork_server(sb)
        assert (await asyncio.wait_for(sb.evaluate(RULES, {}, ENV), 30)).rule_index == 1


async def test_a_compile_during_a_hung_restart_keeps_its_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fork server killed, and its replacement frozen (SIGSTOP, by itself) before it is
    ready: a compile (a save) raises :class:`SandboxUnavailable` at its own deadline (it
    once waited the 15 s start limit). The start goes on meanwhile and, once the new fork
    server is continued, the next compile is served by it."""
    from switchboard_rules import pool

    async with sandbox(kill_grace_ms=500) as sb:
        assert await sb.compile([".a == 1"], {}) == []
        first = sb.pid
        monkeypatch.setattr(pool, "_BOOTSTRAP", STOP_SELF + pool._BOOTSTRAP)
        kill_fork_server(sb)
        began = time.monotonic()
        with pytest.raises(SandboxUnavailable):
            await asyncio.wait_for(sb.compile([".b == 2"], {}), 30)
        took = time.monotonic() - began
        assert took < 10, took  # 2 * compile_ms + kill_grace_ms = 2.5 s, and a loaded machine
        assert sb.pid is not None and sb.pid != first
        restarted = psutil.Process(sb.pid)
        assert restarted.status() == psutil.STATUS_STOPPED  # still starting
        restarted.send_signal(signal.SIGCONT)
        assert await asyncio.wait_for(sb.compile([".b == 2"], {}), 30) == []
        assert sb.pid == restarted.pid
