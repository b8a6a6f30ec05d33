"""SIGKILL of ``serve``'s main process takes its workers with it: none answers a second
later, and a new ``serve`` binds the port at once."""

from __future__ import annotations

import signal
import time
from typing import Any

import httpx
import psutil
import pytest
from sbtest import Server


@pytest.mark.slow
def test_workers_die_with_serve(server_factory: Any, dsn: str, tmp_path: Any) -> None:
    srv = server_factory(dsn, "--workers", "2")
    assert srv.proc is not None
    main = psutil.Process(srv.proc.pid)
    children = main.children()
    # Sanic's workers (not the resource tracker nor the manager of its shared state).
    workers = [p for p in children if p.environ().get("SANIC_WORKER_NAME")]
    assert len(workers) == 2, [p.cmdline() for p in children]
    assert httpx.get(srv.base_url + "/healthz", timeout=5).status_code == 200

    main.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    while (alive := [p for p in workers if _running(p)]) and time.monotonic() - killed < 1.0:
        time.sleep(0.02)
    assert alive == [], [p.pid for p in alive]
    gone_after = time.monotonic() - killed
    with pytest.raises(httpx.ConnectError):
        httpx.get(srv.base_url + "/healthz", timeout=2)

    # A supervisor's restart binds the same port at once: nothing of the old one holds it.
    again = Server(srv.env, srv.port, tmp_path / "again.log").start("--workers", "2")
    try:
        assert httpx.get(again.base_url + "/healthz", timeout=5).status_code == 200
    finally:
        again.stop()
    print(f"\nSIGKILL of serve: its {len(workers)} workers gone {gone_after:.2f} s after")


def _running(proc: psutil.Process) -> bool:
    """Alive and not a zombie (a dead worker its new parent has not reaped yet)."""
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
