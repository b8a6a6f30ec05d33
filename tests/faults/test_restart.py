"""After PostgreSQL restarts, no request fails on a connection the old server's death
left in the pool: each is checked before it is lent, and a dead one takes the pool's
others with it."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from sbfaults import (
    PrivatePostgres,
    deliver,
    half_written,
    mcp_call,
    mcp_message,
    stored_deliveries,
    timed,
)
from sbtest import CLI, database_refusing
from sbworld import World

POOL = 4
DELIVERIES = 500
MCP_CALLS = 200


@pytest.mark.slow
def test_after_a_restart_every_request_succeeds(
    server_factory: Any, private_pg: PrivatePostgres, private_dsn: str, fault_config: Any
) -> None:
    config = fault_config(f"[server]\npool_min_size = {POOL}\npool_max_size = {POOL}\n")
    srv = server_factory(private_dsn, config=config)
    w = World(CLI(srv.env))
    w.human("alice")
    token = w.endpoint("alice", "owner")["token"]
    url = w.webhook("owner", "generic")["ingest_url"]
    mcp = srv.base_url + "/mcp"
    with httpx.Client(timeout=30) as http:
        # Every pooled connection has served, concurrently, before the restart.
        with ThreadPoolExecutor(2 * POOL) as pool:
            warm = list(pool.map(lambda i: deliver(http, url, f"warm-{i}"), range(4 * POOL)))
        assert {r.status_code for r in warm} == {202}

        private_pg.restart()  # returns once the new server accepts connections
        restarted = time.monotonic()
        health = http.get(srv.base_url + "/healthz")
        health_after = time.monotonic() - restarted
        assert health.status_code == 200, health.text
        assert health_after < 1.0, health_after

        # The figure: 500 deliveries and 200 MCP calls, one after another, far
        # more than the pool holds connections: none fails.
        failures = []
        for i in range(DELIVERIES):
            resp = deliver(http, url, f"after-{i}")
            if resp.status_code != 202:
                failures.append(("ingest", resp.status_code, resp.text))
            if i < MCP_CALLS:
                call = mcp_call(http, mcp, token, "list_todos", {}, rid=i)
                if call.status_code != 200 or "error" in mcp_message(call):
                    failures.append(("mcp", call.status_code, call.text))
        assert failures == []
        print(
            f"\nrestart: /healthz 200 {health_after:.2f} s after; {DELIVERIES} deliveries"
            f" and {MCP_CALLS} MCP calls, 0 failed"
        )
    ids = [f"warm-{i}" for i in range(4 * POOL)] + [f"after-{i}" for i in range(DELIVERIES)]
    assert stored_deliveries(private_dsn) == {d: 1 for d in ids}


@pytest.mark.slow
def test_requests_during_an_outage_stop_failing_as_soon_as_the_server_is_back(
    server_factory: Any, private_pg: PrivatePostgres, private_dsn: str, fault_config: Any
) -> None:
    """Producers and an agent keep coming while PostgreSQL is down for 3 s: what they ask
    while it is down may get 503, but nothing they ask once it accepts connections again
    fails. (The pool used to give up its connections during the outage and then wait out
    its reconnect backoff, 1 s, 2 s, 4 s ..., past the server's return; the triage worker's
    polls alone were enough to start that backoff, and /healthz said 503 after a restart.)
    """
    config = fault_config(f"[server]\npool_min_size = {POOL}\npool_max_size = {POOL}\n")
    srv = server_factory(private_dsn, config=config)
    w = World(CLI(srv.env))
    w.human("alice")
    token = w.endpoint("alice", "owner")["token"]
    url = w.webhook("owner", "generic")["ingest_url"]
    mcp = srv.base_url + "/mcp"
    outcomes: list[tuple[str, float, int]] = []
    stop = threading.Event()

    def producer(n: int) -> None:
        with httpx.Client(timeout=30) as http:
            i = 0
            while not stop.is_set():
                started = time.monotonic()
                delivery = f"p{n}-{i}"
                status = deliver(http, url, delivery).status_code
                outcomes.append((delivery, started, status))
                call = mcp_call(http, mcp, token, "list_todos", {}, rid=i)
                ok = call.status_code == 200 and "error" not in mcp_message(call)
                outcomes.append(("mcp", started, 200 if ok else call.status_code))
                i += 1
                time.sleep(0.05)

    with ThreadPoolExecutor(3) as pool:
        running = [pool.submit(producer, n) for n in range(3)]
        time.sleep(1.0)
        private_pg.outage(3.0)
        back = time.monotonic()
        with httpx.Client(timeout=30) as http:
            health = http.get(srv.base_url + "/healthz")
        health_after = time.monotonic() - back
        time.sleep(4.0)
        stop.set()
        for future in running:
            future.result()
    assert health.status_code == 200, health.text
    assert health_after < 1.0, health_after
    after = [(what, status) for what, started, status in outcomes if started >= back]
    assert len(after) > 20
    failed = [(what, status) for what, status in after if status not in (200, 202)]
    assert failed == []
    acked = [what for what, _, status in outcomes if what != "mcp" and status == 202]
    stored = stored_deliveries(private_dsn)
    assert {d: stored.get(d) for d in acked} == {d: 1 for d in acked}
    assert set(stored.values()) == {1}
    print(
        f"\noutage of 3 s: /healthz 200 {health_after:.2f} s after; {len(after)} requests"
        f" after the return, 0 failed; {len(outcomes) - len(after)} during or before"
    )


@pytest.mark.slow
def test_a_refusing_database_answers_8_concurrent_requests_within_the_deadline(
    server_factory: Any, private_pg: PrivatePostgres, private_dsn: str, fault_config: Any
) -> None:
    """Its sessions killed and new ones refused: each of 8 concurrent requests per surface
    answers 503 within ``database_timeout_ms`` (the default, 2 s) + 0.5 s (queued behind
    one another, they took up to twice that); the retries land once and whole, and the
    expected outage logs no traceback."""
    timeout_ms = 2000
    srv = server_factory(
        private_dsn, config=fault_config(f"[server]\ndatabase_timeout_ms = {timeout_ms}\n")
    )
    w = World(CLI(srv.env))
    w.human("alice")
    token = w.endpoint("alice", "owner")["token"]
    url = w.webhook("owner", "generic")["ingest_url"]
    mcp = srv.base_url + "/mcp"
    with httpx.Client(timeout=30) as http:
        assert deliver(http, url, "before").status_code == 202
        with database_refusing(private_pg, private_dsn):
            with ThreadPoolExecutor(16) as pool:
                ingests = [pool.submit(timed, deliver, http, url, f"down-{i}") for i in range(8)]
                calls = [
                    pool.submit(timed, mcp_call, http, mcp, token, "list_todos", {}, rid=i)
                    for i in range(8)
                ]
                outcomes = [f.result() for f in ingests + calls]
        for seconds, resp in outcomes:
            assert not isinstance(resp, Exception), resp
            assert resp.status_code == 503, resp.text
            assert seconds < timeout_ms / 1000 + 0.5, seconds
        print(f"\nrefusing: 16 concurrent 503s in at most {max(s for s, _ in outcomes):.2f} s")
        deadline = time.monotonic() + 15
        while http.get(srv.base_url + "/healthz", timeout=5).status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        for i in range(8):
            assert deliver(http, url, f"down-{i}").status_code == 202
    assert stored_deliveries(private_dsn) == {
        d: 1 for d in ["before", *(f"down-{i}" for i in range(8))]
    }
    assert half_written(private_dsn) == {
        "routed events without a todo": [],
        "todos without their event": [],
    }
    log = srv.log.read_text()
    assert "Traceback" not in log and "internal error" not in log, log[-3000:]
