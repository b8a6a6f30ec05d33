"""Fixes to Sanic's worker manager (25.12) that ``serve`` applies before it starts workers."""

from __future__ import annotations

import logging
import os
import signal
import sys
from contextlib import suppress
from typing import Any

log = logging.getLogger("switchboard.serve")

_STOPS = (signal.SIGINT, signal.SIGTERM)


def stop_during_start_ends_the_wait() -> None:
    """A stop signal while a worker is still starting stops the server (Sanic 25.12 spins).

    Sanic's manager waits for every worker's start-up acknowledgement; its stop handler
    publishes a stop message which that wait re-publishes to itself, so a SIGTERM that
    arrives before the last worker acknowledged made the manager re-read its own message
    forever at full CPU, never exiting (the workers got the signal and stopped). Once the
    manager is shutting down, the wait counts as over: its monitor loop then reads the
    stop message and joins the workers as on any stop.
    """
    from sanic.worker.manager import WorkerManager

    acked = WorkerManager._all_workers_ack
    if getattr(acked, "_switchboard", False):
        return

    def all_acked_or_stopping(self: WorkerManager) -> bool:
        return bool(getattr(self, "_shutting_down", False)) or bool(acked(self))

    all_acked_or_stopping._switchboard = True  # type: ignore[attr-defined]
    WorkerManager._all_workers_ack = all_acked_or_stopping  # type: ignore[method-assign]


def killing_spares_the_main_process() -> None:
    """Sanic's "kill" (a second stop signal, a worker that never came up) kills the workers only.

    Sanic kills each worker's whole process group, and a worker shares its group with
    ``serve``'s main process: the main process killed itself with SIGKILL, so it never
    stopped the embedded PostgreSQL it had started, which outlived it. Each worker is
    killed by its pid instead (its own children die with it: ``lifeline``); the manager
    then goes on as after any stop, and ``serve`` stops the embedded server on its way out.
    """
    from sanic.exceptions import ServerKilled
    from sanic.worker.manager import WorkerManager

    if getattr(WorkerManager.kill, "_switchboard", False):
        return

    def kill_the_workers(self: WorkerManager) -> None:
        for process in self.processes:
            with suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
        raise ServerKilled

    kill_the_workers._switchboard = True  # type: ignore[attr-defined]
    WorkerManager.kill = kill_the_workers  # type: ignore[method-assign]


def stop_handler_has_its_own_connection() -> None:
    """The main process's stop handler no longer cuts into the call on the worker states it
    interrupts.

    The worker states are a dict in Sanic's multiprocessing manager, reached through a
    proxy with one connection per thread, which the main thread asks every 0.1 s while it
    waits for the workers' start-up acknowledgements. Sanic's SIGINT/SIGTERM handler marks
    each worker terminated there: run in the signal handler (on the main thread) in the
    middle of such a call, it sent its own on the same connection, each read the other's
    reply, and ``serve`` ended with two tracebacks (``TypeError: 'list' object is not a
    mapping``), exit 1. The handler's work now runs on a thread of its own, so over a
    connection of its own, and the signal handler waits for it.
    """
    import threading

    from sanic.worker.manager import WorkerManager

    handler = WorkerManager.shutdown_signal
    if getattr(handler, "_switchboard", False):
        return

    def on_a_thread_of_its_own(self: WorkerManager, signum: int, frame: Any) -> None:
        work = threading.Thread(
            target=handler, args=(self, signum, frame), name="sanic-stop-signal", daemon=True
        )
        work.start()
        work.join()

    on_a_thread_of_its_own._switchboard = True  # type: ignore[attr-defined]
    WorkerManager.shutdown_signal = on_a_thread_of_its_own  # type: ignore[method-assign]


def stopping_a_start_is_quiet() -> None:
    """A stop signal that reaches a worker before it serves ends its start: exit 0, quietly.

    Ctrl-C while a worker was still starting (a fraction of a second after the first
    worker was ready) made that worker print a KeyboardInterrupt traceback from wherever
    its start was; a stop in its last steps was even lost (Sanic's loop took it for the
    end of a step of the start), and the worker served on after ``serve`` stopped. Each
    worker now runs :func:`serve_worker`, which ends the start on the first stop signal
    (see :func:`switchboard.stopsignals.stop_ends_the_start`), and it is spawned with
    SIGINT and SIGTERM blocked: one that arrives while Python starts and unpickles the
    worker's target (the second or so before any handler of ours can be in place) waits,
    pending, for that handler instead of raising there.
    """
    from sanic.mixins import startup
    from sanic.worker.process import WorkerProcess

    if getattr(WorkerProcess.start, "_switchboard", False):
        return
    startup.worker_serve = serve_worker  # type: ignore[assignment]
    spawn = WorkerProcess.start

    def spawn_with_stops_blocked(self: WorkerProcess) -> None:
        if self.target is not serve_worker:
            spawn(self)
            return
        held = signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)
        try:
            spawn(self)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)

    spawn_with_stops_blocked._switchboard = True  # type: ignore[attr-defined]
    WorkerProcess.start = spawn_with_stops_blocked  # type: ignore[method-assign]


def serve_worker(**kwargs: Any) -> None:
    """Sanic's worker target (``worker_serve``), whose start a stop signal ends quietly, on a
    listener of its own where the main process reserved the address (``listeners``)."""
    from sanic.worker.serve import worker_serve

    from .. import lifeline, stopsignals
    from . import listeners

    if not lifeline.is_worker():  # Sanic's single process: its own signals, as before
        worker_serve(**kwargs)
        return
    listeners.listen_in_the_worker(kwargs)
    _hold_stops_while_the_server_is_made()
    try:
        stopsignals.stop_ends_the_start()
        worker_serve(**kwargs)
    except stopsignals.StoppedWhileStarting:
        _stopped_before_serving()


def _hold_stops_while_the_server_is_made() -> None:
    """In the worker, where Sanic ends its start:

    * from the start-up acknowledgement until Sanic sets up its signals, a stop is held
      (``stopsignals.hold_stops``): Sanic logs an interrupted creation of the listening
      socket, traceback and all, as a server that could not start;
    * Sanic's own signal set-up is skipped: it ignored both signals for a moment (one
      arriving then was lost) and then stopped the loop on a stop before the worker served,
      which the loop took for the end of the step it was running: the stop was lost, or
      Sanic took it for a start that failed. The start's handler stays until the worker's
      own are put in place (``stopsignals.first_stop_only``, an after-start listener).
    """
    from sanic import Sanic
    from sanic.server import runners

    from .. import stopsignals

    ack = Sanic.ack

    def ack_holding_stops(self: Sanic[Any, Any]) -> None:
        stopsignals.hold_stops()
        ack(self)

    Sanic.ack = ack_holding_stops  # type: ignore[method-assign]
    set_up_signals = runners._setup_system_signals

    def keep_the_start_handler(
        app: Sanic[Any, Any], run_multiple: bool, register_sys_signals: bool, loop: Any
    ) -> None:
        if not stopsignals.starting():
            set_up_signals(app, run_multiple, register_sys_signals, loop)
            return
        os.environ["SANIC_WORKER_PROCESS"] = "true"  # as Sanic's own does
        stopsignals.release_stops()

    runners._setup_system_signals = keep_the_start_handler


def _stopped_before_serving() -> None:
    """The end of a worker whose start a stop signal ended: its live gauges go, its lines
    are written, and it exits 0 at once. Nothing of its start needs undoing: its database
    connections close with it, its sandbox processes die with it (``PR_SET_PDEATHSIG``),
    and its tasks and threads, cut anywhere in the start, are not run to any end (their
    destruction at an ordinary exit would log, or wait for a thread that never ends)."""
    log.info("stop signal before the worker served: worker [%s] stopped", os.getpid())
    scrape = sys.modules.get("switchboard.scrape")  # not imported yet: no series written
    if scrape is not None:
        scrape.process_exit()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with suppress(Exception):
            stream.flush()
    os._exit(0)
