"""The sandbox's own processes frozen (SIGSTOP) or killed: every wait keeps its deadline.

Real faults on real processes: a delivery that needs what a frozen process would give routes
by its default with a fault in time, the sandbox recovers once the process goes on, and a
frozen process never outlives its deadline nor a server's stop.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import psycopg
import pytest
from sbfaults import frozen
from sbsandbox import sandbox
from sbtest import CLI, Server
from sbworld import World

from switchboard.routing.trace import validate_trace
from switchboard.runtime import Runtime
from switchboard.service import rules as rules_svc

pytestmark = pytest.mark.anyio

RULES: list[tuple[str | None, str]] = [("a", '.kind == "issues"'), ("b", ".payload.n == 7")]
ENV: dict[str, Any] = {"source": "gitea", "kind": "push", "payload": {"n": 7}, "size": 10}


def sandbox_procs(root: int) -> list[psutil.Process]:
    """``root``'s descendants in the sandbox (forks keep the fork server's cmdline)."""
    out = []
    for proc in psutil.Process(root).children(recursive=True):
        try:
            if "sandbox_child" in " ".join(proc.cmdline()) and proc.status() != "zombie":
                out.append(proc)
        except psutil.Error:
            continue
    return out


def fork_server(root: int) -> psutil.Process:
    """The fork server under ``root``: the sandbox process whose parent is not one."""
    procs = sandbox_procs(root)
    pids = {p.pid for p in procs}
    found = [p for p in procs if p.ppid() not in pids]
    assert len(found) == 1, found
    return found[0]


# -- the server's side, without a server -------------------------------------------------------


@pytest.mark.slow
async def test_a_frozen_warm_evaluator_never_holds_a_large_frame_past_its_deadline() -> None:
    """A frame larger than the socket's buffer, sent to a warm evaluator frozen meanwhile:
    the send itself waits for it, and must keep the frame's deadline (it once waited for
    ever). The evaluator is killed then and the envelope gets its fault in time."""
    big = {**ENV, "payload": {"n": 7, "blob": "x" * 2**21}}  # 2 MiB: far past the buffer
    rules: list[tuple[str | None, str]] = [("b", ".payload | .n == 7")]
    async with sandbox(kill_grace_ms=500) as sb:
        assert (await sb.evaluate(rules, {}, big)).rule_index == 0
        assert sb.pid is not None
        (evaluator,) = [e for z in psutil.Process(sb.pid).children() for e in z.children()]
        with frozen(evaluator):
            began = time.monotonic()
            result = await asyncio.wait_for(sb.evaluate(rules, {}, big), 30)
            took = time.monotonic() - began
            # event_ms + kill_grace_ms + the parse allowance, with room for a loaded machine
            assert took < 5, took
            assert [(f.rule_index, f.cause) for f in result.faults] == [(-1, "sandbox_failure")]
            psutil.wait_procs([evaluator], timeout=10)
            assert not evaluator.is_running() or evaluator.status() == "zombie"
        assert (await sb.evaluate(rules, {}, big)).rule_index == 0  # a new one serves


@pytest.mark.slow
async def test_a_fork_server_frozen_at_its_restart_costs_a_delivery_its_deadline_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fork server killed, and its replacement frozen (SIGSTOP, by itself) before it is
    ready: a delivery routes by its default with ``sandbox_failure`` within its deadline
    (it once waited 15 s for the start, then raised). The start goes on meanwhile, and
    once the new fork server is continued it serves: started once, not again per delivery.
    """
    from switchboard_rules import pool

    async with sandbox(kill_grace_ms=500) as sb:
        assert (await sb.evaluate(RULES, {}, ENV)).rule_index == 1
        first = sb.pid
        assert first is not None
        stop_self = "import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)\n"
        monkeypatch.setattr(pool, "_BOOTSTRAP", stop_self + pool._BOOTSTRAP)
        tree = [psutil.Process(first), *psutil.Process(first).children(recursive=True)]
        os.kill(first, signal.SIGKILL)
        _, alive = psutil.wait_procs(tree, timeout=10)  # its zygote and evaluator too
        assert alive == []
        began = time.monotonic()
        result = await asyncio.wait_for(sb.evaluate(RULES, {}, ENV), 30)
        took = time.monotonic() - began
        assert [(f.rule_index, f.cause) for f in result.faults] == [(-1, "sandbox_failure")]
        assert took < 8, took  # event_ms + kill_grace_ms (0.75 s) and a loaded machine
        second = sb.pid
        assert second is not None and second != first
        restarted = psutil.Process(second)
        assert restarted.status() == psutil.STATUS_STOPPED
        restarted.send_signal(signal.SIGCONT)
        result = await asyncio.wait_for(sb.evaluate(RULES, {}, ENV), 30)
        assert result.rule_index == 1, result
        assert sb.pid == second


# -- a real server -----------------------------------------------------------------------------

#: The sandbox's hard deadline for a delivery needing a new evaluator: event_ms (250) +
#: kill_grace_ms (500) + twice compile_ms (1000) for its zygote's compile = 2.75 s, well
#: within the stage's own timeout (10 s): what answers is the sandbox's deadline, not it.
#: ``direct = false``: these are the sandbox's faults, and the rule is one the server could
#: otherwise decide itself (direct.py).
CONFIG = (
    "[routing]\nstage_timeout_ms = 10000\n[plugins.rules]\nkill_grace_ms = 500\ncompile_ms = 1000\n"
    "direct = false\n"
)


def _deliver(hook: dict[str, Any], body: Any, delivery: str) -> tuple[float, dict[str, Any]]:
    began = time.monotonic()
    resp = httpx.post(
        hook["ingest_url"],
        content=json.dumps(body).encode(),
        headers={"X-Delivery-Id": delivery, "Content-Type": "application/json"},
        timeout=60,
    )
    assert resp.status_code == 202, resp.text
    return time.monotonic() - began, dict(resp.json())


def _trace(dsn: str, hook: dict[str, Any], delivery: str) -> dict[str, Any]:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT routing_trace FROM events WHERE webhook_id = %s AND external_id LIKE %s",
            (hook["webhook_id"], f"%:{delivery}"),
        ).fetchone()
    assert row is not None
    trace: dict[str, Any] = row[0]
    validate_trace(trace)
    return trace


@pytest.fixture
def served(server_factory: Any, dsn: str, tmp_path: Path) -> tuple[Server, World]:
    config = tmp_path / "sb.toml"
    config.write_text(CONFIG)
    srv: Server = server_factory(dsn, config=config)
    w = World(CLI(srv.env), direct=True)
    w.human("alice")
    w.endpoint("alice", "owner", queues="inbox", webhook_queues="inbox,triage")
    return srv, w


async def _hook_with_rules(w: World, runtime: Runtime) -> dict[str, Any]:
    hook = w.webhook("owner", "generic")
    rule = {"id": "seven", "expr": ".payload.n == 7", "action": {"queue": "triage"}}
    await rules_svc.set_rules(runtime, None, hook["webhook_id"], [rule])
    return hook


@pytest.mark.slow
async def test_a_frozen_fork_server_costs_a_delivery_its_default_not_its_deadline(
    served: tuple[Server, World], runtime: Runtime, dsn: str
) -> None:
    """The fork server frozen while a rule set just saved needs its first evaluator: the
    delivery routes by its default with ``sandbox_failure`` within the sandbox's deadline
    (never a 500, never the stage's timeout); a warm rule set goes on meanwhile; once the
    fork server goes on, the new rule set is served too, and nothing is left stopped."""
    srv, w = served
    assert srv.proc is not None
    warm = await _hook_with_rules(w, runtime)
    fresh = await _hook_with_rules(w, runtime)  # another webhook: a zygote of its own
    took, routed = _deliver(warm, {"n": 7}, "w1")
    assert [t["queue"] for t in routed["todos"]] == ["triage"]
    server = fork_server(srv.proc.pid)
    with frozen(server):
        took, routed = _deliver(fresh, {"n": 7}, "f1")
        assert [t["queue"] for t in routed["todos"]] == ["inbox"]  # the default
        assert took < 8, took  # 2.75 s of deadline, and a loaded machine's delay
        trace = _trace(dsn, fresh, "f1")
        assert trace["stage"] == "default"
        assert [f["cause"] for f in trace["faults"]] == ["sandbox_failure"], trace
        # the warm rule set's evaluator needs nothing of the fork server
        took, routed = _deliver(warm, {"n": 7}, "w2")
        assert [t["queue"] for t in routed["todos"]] == ["triage"]
    took, routed = _deliver(fresh, {"n": 7}, "f2")
    assert [t["queue"] for t in routed["todos"]] == ["triage"], _trace(dsn, fresh, "f2")
    assert fork_server(srv.proc.pid).pid == server.pid  # recovered, not replaced
    stopped = [p for p in sandbox_procs(srv.proc.pid) if p.status() == psutil.STATUS_STOPPED]
    assert stopped == []


@pytest.mark.slow
async def test_serve_stops_within_its_grace_with_its_sandbox_frozen(
    served: tuple[Server, World], runtime: Runtime
) -> None:
    """SIGTERM while the fork server and an evaluator are frozen: ``serve`` stops within
    its shutdown grace and leaves no sandbox process behind."""
    srv, w = served
    proc = srv.proc
    assert proc is not None
    hook = await _hook_with_rules(w, runtime)
    _deliver(hook, {"n": 7}, "d1")
    server = fork_server(proc.pid)
    tree = sandbox_procs(proc.pid)
    evaluators = [p for p in tree if p.ppid() != server.pid and p.pid != server.pid]
    assert evaluators
    with frozen(server, *evaluators):
        began = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        took = time.monotonic() - began
    assert took < 15, took  # shutdown_grace_s
    gone, alive = psutil.wait_procs(tree, timeout=5)
    assert alive == [], alive
    # none of the sandbox escaped to init either
    assert not [p for p in tree if p.is_running() and p.status() != "zombie"]
