"""Two ``serve`` processes on one PostgreSQL, producers delivering to both, and one of
them SIGKILLed mid-load: every delivery answered 2xx is stored exactly once and whole (its
event routed with its todo), and the survivor goes on answering 202."""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

import httpx
import psutil
import pytest
from sbfaults import (
    PrivatePostgres,
    deliver,
    dispositions,
    half_written,
    stored_deliveries,
)
from sbtest import CLI
from sbworld import World

#: Producers per serve.
PRODUCERS = 3
#: Load before the kill, and after it on the survivor.
BEFORE_S = 1.5
AFTER_S = 2.0


@pytest.mark.slow
def test_two_serves_one_killed_lose_and_double_nothing(
    server_factory: Any, private_pg: PrivatePostgres, private_dsn: str
) -> None:
    victim = server_factory(private_dsn)
    survivor = server_factory(private_dsn)
    w = World(CLI(survivor.env))
    w.human("alice")
    w.endpoint("alice", "owner")
    path = "/" + w.webhook("owner", "generic")["ingest_url"].split("/", 3)[3]
    assert victim.proc is not None
    doomed = psutil.Process(victim.proc.pid)

    acked: dict[str, str] = {}  # delivery id -> which serve answered 2xx
    survivor_failures: list[tuple[str, Any]] = []
    lock = threading.Lock()
    stop = threading.Event()
    redelivered: list[str] = []

    def producer(name: str, base: str) -> None:
        """Delivers unique ids to one serve; a delivery that serve did not acknowledge is
        redelivered (same id) to the other, as a producer's retry through a load balancer
        would: it may have been committed before the kill, and must still land once."""
        with httpx.Client(timeout=10) as http:
            i = 0
            while not stop.is_set():
                delivery = f"{name}-{i}"
                i += 1
                try:
                    resp = deliver(http, base + path, delivery, timeout=10)
                    ok = resp.status_code == 202
                    outcome: Any = resp.status_code
                except httpx.HTTPError as exc:
                    ok, outcome = False, exc
                if ok:
                    with lock:
                        acked[delivery] = base
                    continue
                if base == survivor.base_url:
                    survivor_failures.append((delivery, outcome))
                    continue
                redelivered.append(delivery)
                resp = deliver(http, survivor.base_url + path, delivery, timeout=10)
                if resp.status_code == 202:
                    with lock:
                        acked[delivery] = survivor.base_url
                else:
                    survivor_failures.append((delivery, resp.status_code))

    threads = [
        threading.Thread(target=producer, args=(f"{label}{n}", srv.base_url))
        for label, srv in (("v", victim), ("s", survivor))
        for n in range(PRODUCERS)
    ]
    for t in threads:
        t.start()
    try:
        time.sleep(BEFORE_S)
        with lock:
            before = dict(acked)
        sandboxes = doomed.children(recursive=True)
        doomed.send_signal(signal.SIGKILL)
        time.sleep(AFTER_S)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    doomed.wait(5)
    assert not survivor_failures, survivor_failures[:5]
    victim_acked = sum(1 for d in before if before[d] == victim.base_url)
    after = [d for d in acked if d not in before and acked[d] == survivor.base_url]
    assert victim_acked > 0 and after and redelivered, (victim_acked, len(after), redelivered)
    # The victim's rules sandbox went with it (PR_SET_PDEATHSIG).
    deadline = time.monotonic() + 2
    while any(_running(p) for p in sandboxes) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_running(p) for p in sandboxes), [p.pid for p in sandboxes]

    # The survivor still answers, and every acknowledged delivery is stored exactly once
    # and whole; nothing is stored twice, acknowledged or not.
    with httpx.Client(timeout=10) as http:
        assert deliver(http, survivor.base_url + path, "final").status_code == 202
    acked["final"] = survivor.base_url
    stored = stored_deliveries(private_dsn)
    assert {d: stored.get(d) for d in acked} == {d: 1 for d in acked}
    assert all(n == 1 for n in stored.values()), {d: n for d, n in stored.items() if n != 1}
    assert set(stored) == set(acked), set(stored) ^ set(acked)
    assert dispositions(private_dsn) == {"routed": len(stored)}
    assert half_written(private_dsn) == {
        "routed events without a todo": [],
        "todos without their event": [],
    }
    print(
        f"\ntwo serves, one SIGKILLed under {2 * PRODUCERS} producers: {len(acked)}"
        f" acknowledged ({victim_acked} by the victim), {len(after)} by the survivor after"
        f" the kill ({len(redelivered)} redelivered there after the victim failed them), 0 lost, 0 doubled, 0 half-written; {len(sandboxes)} sandbox"
        " process(es) of the victim gone"
    )


def _running(proc: psutil.Process) -> bool:
    """Alive and not a zombie."""
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
