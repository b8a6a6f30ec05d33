"""A worker never outlives ``serve``: it dies with the process that started it.

Sanic's workers are children of ``serve``'s main process. If that one is killed outright
(SIGKILL, the OOM killer), nothing tells them: they went on serving, and a supervisor that
restarted ``serve`` raced them for the port, the pool and the sandbox. Each worker asks the
kernel for SIGKILL at its parent's death (``PR_SET_PDEATHSIG``; its sandbox processes ask
the same of it), then checks that the parent is still the ``serve`` that started it, for a
death before the request; elsewhere than Linux a watcher polls the parent instead.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import sys

#: ``serve``'s pid, exported before its workers start.
SERVE_PID_ENV = "SWITCHBOARD_SERVE_PID"
#: Set in Sanic's worker processes only (not in ``serve --workers 1``, which is its own).
_WORKER_ENV = "SANIC_WORKER_NAME"
_PR_SET_PDEATHSIG = 1
#: How often a worker without PR_SET_PDEATHSIG looks for its parent.
POLL_S = 0.5


def is_worker() -> bool:
    return bool(os.environ.get(_WORKER_ENV)) and bool(os.environ.get(SERVE_PID_ENV))


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def bind_to_serve() -> bool:
    """In a worker: die with ``serve`` (True when the kernel will see to it)."""
    if not is_worker():
        return False
    bound = False
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            bound = libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
        except (OSError, AttributeError):
            bound = False
    if os.getppid() != int(os.environ[SERVE_PID_ENV]):
        _die()  # serve died before the request above: nobody will signal it now
    return bound


async def watch_serve() -> None:
    """Where the kernel cannot be asked: poll for the parent (a worker's own task)."""
    serve = int(os.environ[SERVE_PID_ENV])
    while True:
        if os.getppid() != serve:
            _die()
        await asyncio.sleep(POLL_S)
