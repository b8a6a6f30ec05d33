"""SIGKILL of ``serve``'s main process under load takes its workers, and their sandbox
processes, with it: none answers a second later, a new ``serve`` binds the port at once, and
every delivery acknowledged before the kill is stored exactly once and whole."""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

import httpx
import psutil
import pytest
from sbfaults import deliver, half_written, stored_deliveries
from sbtest import CLI, Server, sanic_workers
from sbworld import World

#: Producers delivering while serve is killed.
PRODUCERS = 4


@pytest.mark.slow
def test_workers_die_with_serve(server_factory: Any, dsn: str, tmp_path: Any) -> None:
    srv = server_factory(dsn, "--workers", "2")
    w = World(CLI(srv.env))
    w.human("alice")
    w.endpoint("alice", "owner")
    path = "/" + w.webhook("owner", "generic")["ingest_url"].split("/", 3)[3]
    assert srv.proc is not None
    main = psutil.Process(srv.proc.pid)
    workers = sanic_workers(main)
    assert len(workers) == 2, [p.cmdline() for p in main.children()]
    assert httpx.get(srv.base_url + "/healthz", timeout=5).status_code == 200

    acked: list[str] = []
    failed: list[str] = []
    stop = threading.Event()

    def producer(n: int) -> None:
        with httpx.Client(timeout=10) as http:
            i = 0
            while not stop.is_set():
                delivery = f"p{n}-{i}"
                i += 1
                try:
                    ok = deliver(http, srv.base_url + path, delivery).status_code == 202
                except httpx.HTTPError:
                    ok = False
                (acked if ok else failed).append(delivery)
                if not ok:
                    time.sleep(0.05)

    threads = [threading.Thread(target=producer, args=(n,)) for n in range(PRODUCERS)]
    for t in threads:
        t.start()
    try:
        time.sleep(1.0)
        # The rules sandbox of each worker (its evaluator processes), as they are now.
        sandboxes = [c for p in workers for c in p.children(recursive=True)]
        main.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        doomed = [*workers, *sandboxes]
        while (alive := [p for p in doomed if _running(p)]) and time.monotonic() - killed < 1.0:
            time.sleep(0.02)
        gone_after = time.monotonic() - killed
        time.sleep(0.3)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert sandboxes, "no sandbox process ran under the workers"
    assert alive == [], [(p.pid, p.cmdline()) for p in alive]
    assert acked and failed, (len(acked), len(failed))
    with pytest.raises(httpx.ConnectError):
        httpx.get(srv.base_url + "/healthz", timeout=2)

    # A supervisor's restart binds the same port at once: nothing of the old one holds it.
    again = Server(srv.env, srv.port, tmp_path / "again.log").start("--workers", "2")
    try:
        assert httpx.get(again.base_url + "/healthz", timeout=5).status_code == 200
        # The producers redeliver what was not acknowledged; it lands once, as does the rest.
        with httpx.Client(timeout=10) as http:
            for delivery in failed:
                assert deliver(http, again.base_url + path, delivery).status_code == 202
    finally:
        again.stop()
    stored = stored_deliveries(dsn)
    assert stored == {d: 1 for d in [*acked, *failed]}
    assert half_written(dsn) == {
        "routed events without a todo": [],
        "todos without their event": [],
    }
    print(
        f"\nSIGKILL of serve under {PRODUCERS} producers: its {len(workers)} workers and"
        f" {len(sandboxes)} sandbox process(es) gone {gone_after:.2f} s after; {len(acked)}"
        f" acknowledged stored once, {len(failed)} failed at the kill redelivered once"
    )


def _running(proc: psutil.Process) -> bool:
    """Alive and not a zombie (a dead worker its new parent has not reaped yet)."""
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
