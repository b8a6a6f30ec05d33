"""Sanic's "kill" without killing ``serve``: a second stop signal while it drains (an
impatient operator, a supervisor's retry) cuts the drain short, and a worker that never
comes up stops it; either way ``serve`` stops the embedded PostgreSQL it started, and no
worker, evaluator or database process outlives it."""

from __future__ import annotations

import signal
import socket
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from sbfaults import assert_gone_with_serve, embedded_stage, serve_logged, stop_leftover_postmaster
from sbtest import install_plugin_module, make_env, stop_process_group

#: Long enough that a serve still draining when the test gives up is unmistakable.
GRACE_S = 30


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_a_second_sigterm_during_the_drain_still_stops_the_embedded_database(
    server_factory: Any, fault_config: Any, tmp_path: Path, workers: int
) -> None:
    data = tmp_path / "data"
    srv = server_factory(
        None,
        "--workers",
        str(workers),
        data_dir=data,
        config=fault_config(f"[server]\nshutdown_grace_s = {GRACE_S}\n"),
    )
    path, postmaster, group = embedded_stage(srv, data)
    # A delivery whose body never completes holds the drain open for the whole grace.
    stuck = socket.create_connection(("127.0.0.1", srv.port))
    stuck.sendall(
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"X-Delivery-Id: stuck\r\nContent-Length: 100\r\n\r\n{{".encode()
    )
    time.sleep(0.3)

    try:
        _stop_twice(srv, postmaster, group)
    finally:
        stuck.close()
        stop_leftover_postmaster(data)  # this test leaves no server behind, even failing


def _stop_twice(srv: Any, postmaster: psutil.Process, group: list[int]) -> None:
    srv.proc.send_signal(signal.SIGTERM)
    time.sleep(1.0)
    assert srv.proc.poll() is None, "serve stopped without waiting for the stuck delivery"
    signalled = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    code = srv.proc.wait(GRACE_S)
    took = time.monotonic() - signalled
    log = srv.log.read_text()
    # serve ended on its own (not killed by a signal, its own included), well before the
    # grace ran out ...
    assert code >= 0, (code, log[-3000:])
    assert took < GRACE_S / 2, (took, log[-3000:])
    # ... and stopped the database on its way out: pg_ctl's fast stop, not a leftover.
    assert_gone_with_serve(postmaster, group, log)


#: A third party's plugin whose start-up fails in serve's workers only (serve's main
#: process and the CLI never start a runtime's plugins with a serve pid that is not theirs).
BROKEN = """\
import os

from switchboard.plugin import hookimpl


@hookimpl
def switchboard_startup(runtime, app):
    serve = os.environ.get("SWITCHBOARD_SERVE_PID")
    if serve and serve != str(os.getpid()):
        raise RuntimeError("broken_start refuses to start a worker")
"""


@pytest.mark.slow
def test_a_worker_that_never_comes_up_stops_serve_and_the_embedded_database(
    tmp_path: Path,
) -> None:
    site = install_plugin_module(
        "switchboard-broken-start", "switchboard_broken_start", BROKEN, tmp_path / "broken"
    )
    data = tmp_path / "data"
    env = make_env(None, data, PYTHONPATH=str(site))
    log = tmp_path / "serve.log"
    proc = serve_logged(env, log, workers=2)
    try:
        code = proc.wait(60)
    finally:
        stop_process_group(proc)
        left = stop_leftover_postmaster(data)
    text = log.read_text()
    assert "broken_start refuses to start a worker" in text, text[-3000:]
    # serve failed (Sanic's exit status after a kill), not killed by its own SIGKILL ...
    assert code == 1, (code, text[-3000:])
    # ... and stopped the database it had started: nothing left to clean up above.
    assert not left, "the embedded PostgreSQL outlived serve"
