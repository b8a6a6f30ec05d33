"""Two fixes to Sanic's worker manager (25.12) that ``serve`` applies before it starts workers."""

from __future__ import annotations

import os
import signal
from contextlib import suppress


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
