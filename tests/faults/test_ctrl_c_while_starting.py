"""Ctrl-C while a worker of ``serve --workers 2`` is still starting: that worker's start ends
at once and quietly (no KeyboardInterrupt traceback), serve exits 0 within a few seconds,
stops the embedded PostgreSQL it started, and leaves no process behind.

Healthz answers as soon as one worker serves, so a Ctrl-C soon after a start often finds
the other still starting. Here every worker is held at one point of its start (a plugin
that waits there), and the signal is sent once all are: the window is hit every time.
serve's main process meanwhile asks for its workers' states every 0.1 s: a stop in the
middle of such a call is made to happen too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sbfaults import (
    assert_gone_with_serve,
    exit_after,
    postmaster_of,
    serve_logged,
    serve_tree,
    stop_leftover_postmaster,
)
from sbtest import install_plugin_module, make_env, stop_process_group

WORKERS = 2
#: How long the held start would last: far past any stop that ends it.
HELD_S = 60
#: Python's own start-up in a worker (before any code of serve's runs) is held this long:
#: a stop then waits for it, so it is short.
SPAWN_HELD_S = 1.5
#: serve is gone within this after the signal (Sanic's worker timeout is 30 s).
STOP_S = 10
MARK = "slow-start: held at"

#: Holds every worker of serve at ``SLOW_START_AT``: its start-up hook, or an after-start
#: listener (the last steps before the worker serves).
PLUGIN = f"""\
import asyncio
import os
import sys

from switchboard.plugin import hookimpl


def _held(where):
    serve = os.environ.get("SWITCHBOARD_SERVE_PID")
    return os.environ.get("SLOW_START_AT") == where and serve and serve != str(os.getpid())


async def _hold(where):
    print("{MARK}", where, os.getpid(), file=sys.stderr, flush=True)
    await asyncio.sleep({HELD_S})


@hookimpl
def switchboard_startup(runtime, app):
    if _held("startup"):
        return _hold("startup")
    return None


@hookimpl
def switchboard_register_routes(app, runtime):
    if _held("after_start"):
        app.register_listener(lambda app: _hold("after_start"), "after_server_start")
"""

#: Holds a worker's Python start-up itself, before it runs anything of Sanic's or serve's.
SITECUSTOMIZE = f"""\
import os
import sys
import time

if (
    os.environ.get("SLOW_START_AT") == "spawn"
    and os.environ.get("SANIC_WORKER_NAME")
    and "--multiprocessing-fork" in sys.argv
):
    print("{MARK}", "spawn", os.getpid(), file=sys.stderr, flush=True)
    time.sleep({SPAWN_HELD_S})
"""


@pytest.fixture(scope="module")
def slow_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("slow-start")
    site = install_plugin_module("switchboard-slow-start", "switchboard_slow_start", PLUGIN, root)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return site


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One data directory (one initdb) for the module's serves, each of which starts and
    stops the embedded PostgreSQL in it."""
    data = tmp_path_factory.mktemp("ctrl-c-starting") / "data"
    yield data
    stop_leftover_postmaster(data)


@pytest.mark.slow
@pytest.mark.parametrize("where", ["spawn", "startup", "after_start"])
def test_ctrl_c_while_the_workers_start_stops_serve_quietly(
    slow_site: Path, data_dir: Path, tmp_path: Path, where: str
) -> None:
    path = os.pathsep.join(p for p in (str(slow_site), os.environ.get("PYTHONPATH")) if p)
    env = make_env(None, data_dir, PYTHONPATH=path, SLOW_START_AT=where)
    log = tmp_path / "serve.log"
    proc = serve_logged(env, log, WORKERS)
    try:
        _wait_for(lambda: log.read_text().count(MARK) >= WORKERS, proc, log)
        text = log.read_text()
        assert "Worker ready" not in text, text[-3000:]
        postmaster = postmaster_of(data_dir / "pg")
        group = serve_tree(proc.pid)
        # what the terminal sends on Ctrl-C
        code, took = exit_after(proc, lambda: os.killpg(proc.pid, signal.SIGINT), 30)
    finally:
        stop_process_group(proc)
    text = log.read_text()
    assert code == 0, (code, text[-3000:])
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text[-3000:]
    assert took < STOP_S, (took, text[-3000:])
    assert "Worker ready" not in text, text[-3000:]  # the start was cut, not waited for
    try:
        assert_gone_with_serve(postmaster, group, text)
    finally:
        stop_leftover_postmaster(data_dir)


def _wait_for(done: Callable[[], bool], proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if done():
            return
        if proc.poll() is not None:
            raise AssertionError(f"serve exited early:\n{log.read_text()[-3000:]}")
        time.sleep(0.01)
    raise AssertionError(f"the workers never reached the held point:\n{log.read_text()[-3000:]}")


#: serve's main process waiting for its workers' acknowledgements (Sanic's worker manager,
#: the worker states in a multiprocessing manager), stopped in the middle of a call on them.
STOP_MID_CALL = """\
import os, signal, sys, time
from multiprocessing import Manager, Pipe, get_context

from sanic.worker.manager import WorkerManager

from switchboard.cli import manager_fixes


def idle(ready):
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # serve's stop ends it, quietly
    open(ready, "w").close()
    time.sleep(30)


if __name__ == "__main__":
    manager_fixes.stop_handler_has_its_own_connection()
    ready = sys.argv[1]
    with Manager() as sync:
        states = sync.dict()
        manager = WorkerManager(
            1, idle, {"ready": ready}, get_context("spawn"), Pipe(), states
        )
        manager.start()
        try:
            while not os.path.exists(ready):
                time.sleep(0.01)
            conn = states._tls.connection  # this thread's, to the states' manager
            recv = conn.recv

            def recv_after_a_stop():
                conn.recv = recv
                os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, while a reply is awaited
                time.sleep(0.2)
                return recv()

            conn.recv = recv_after_a_stop
            got = states.values()
            print("values:", type(got).__name__, "stopping:", manager._shutting_down)
        finally:
            for process in manager.processes:
                process._current_process.kill()
                process._current_process.join()
"""


def test_a_stop_in_the_middle_of_a_call_on_the_worker_states_leaves_it_whole(
    tmp_path: Path,
) -> None:
    script = tmp_path / "stop_mid_call.py"
    script.write_text(textwrap.dedent(STOP_MID_CALL))
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "ready")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    # Sanic's handler, run on the interrupted call's connection, read that call's reply
    # ("TypeError: 'list' object is not a mapping") and left the call its own.
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.stdout.strip() == "values: list stopping: True", (done.stdout, done.stderr)
