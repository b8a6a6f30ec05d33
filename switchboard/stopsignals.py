"""A worker acts on the first stop signal only: the next are ``serve``'s to act on."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

from . import lifeline

_STOPS = (signal.SIGINT, signal.SIGTERM)


def first_stop_only(app: Any) -> None:
    """In a worker of ``serve --workers N``: the first SIGINT or SIGTERM starts the drain,
    and the worker ignores every stop signal after it.

    Ctrl-C in a terminal signals the whole process group: each worker gets SIGINT from
    the terminal and, a moment later, SIGTERM from ``serve``'s main process. Sanic stopped
    the worker's loop once per signal, and a second stop ended the drain's wait for the
    requests in flight at once, so they were cut unanswered. The drain has its own
    deadline (``server.shutdown_grace_s``) and ``serve`` kills its workers on a second
    stop signal of its own, so ignoring them here never leaves a worker running. ``serve
    --workers 1`` is its own worker and main process: there a second signal still cuts
    the drain short.
    """
    if not lifeline.is_worker():
        return
    loop = asyncio.get_running_loop()

    def first() -> None:
        for sig in _STOPS:
            # removed from the loop first, so that Sanic's own removal after its loop
            # stops finds nothing to restore and leaves them ignored
            loop.remove_signal_handler(sig)
            signal.signal(sig, signal.SIG_IGN)
        app.stop(terminate=False)

    for sig in _STOPS:
        loop.add_signal_handler(sig, first)
