"""A worker's stop signals: before it serves, a stop ends its start (quietly); once it
serves, it acts on the first stop signal only: the next are ``serve``'s to act on."""

from __future__ import annotations

import asyncio
import signal
from types import FrameType
from typing import Any

from . import lifeline

_STOPS = (signal.SIGINT, signal.SIGTERM)

#: Where a worker of ``serve --workers N`` is in its start, for a stop signal: not
#: starting (its own handlers, or none yet), starting (a stop ends the start at once), or
#: holding (a stop is remembered, and ends the start once the hold is released).
_NOT_STARTING, _STARTING, _HOLDING = "", "starting", "holding"
_phase = _NOT_STARTING
_held = False


class StoppedWhileStarting(SystemExit):
    """A stop signal ended a worker's start before it served: the worker exits 0.

    A ``SystemExit``: asyncio and uvloop pass it through every task and callback (as they
    do KeyboardInterrupt), Sanic's ``except Exception`` around a worker's start does not
    log it, and psycopg does not take it for a Ctrl-C to cancel a query for.
    """

    def __init__(self) -> None:
        super().__init__(0)


def stop_ends_the_start() -> None:
    """First thing in a worker of ``serve --workers N``: a stop signal (SIGINT or SIGTERM)
    before it serves ends its start at once, and the worker ignores every stop signal
    after it.

    Ctrl-C signals the whole process group: a worker still starting got SIGINT from the
    terminal and, a moment later, SIGINT again from ``serve``'s main process. Python's
    default SIGINT handler raised KeyboardInterrupt wherever the start was (building the
    app, opening the store, a plugin's start-up), which nothing in Sanic's worker handles:
    it printed a traceback, and the second signal another one while the first was printed.
    Here the first raises :class:`StoppedWhileStarting`, which ``serve``'s worker target
    catches (manager_fixes) and exits 0 on, without a line of traceback; ignoring the
    signal instead would keep the worker starting, then serving, after ``serve`` stopped.

    ``serve`` starts its workers with both signals blocked (a stop before this point waits,
    pending): unblocked here, once the handler is in place, so one that arrived since acts
    at once.
    """
    global _phase, _held
    _phase, _held = _STARTING, False
    for sig in _STOPS:
        signal.signal(sig, _stop_while_starting)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPS)


def _stop_while_starting(signum: int, frame: FrameType | None) -> None:
    global _held
    for sig in _STOPS:
        signal.signal(sig, signal.SIG_IGN)  # the next (serve's own SIGINT) is not ours
    if _phase == _HOLDING:
        _held = True
        return
    raise StoppedWhileStarting


def starting() -> bool:
    """Whether this process is a worker whose start a stop signal ends (see above)."""
    return _phase != _NOT_STARTING


def hold_stops() -> None:
    """From the worker's start-up acknowledgement until :func:`release_stops`: a stop signal
    is remembered, not acted on (Sanic logs whatever interrupts its listening socket's
    creation, with a traceback, as a server that could not start)."""
    global _phase
    if _phase == _STARTING:
        _phase = _HOLDING


def release_stops() -> None:
    """The end of :func:`hold_stops`: a stop that arrived meanwhile ends the start now."""
    global _phase
    if _phase != _HOLDING:
        return
    _phase = _STARTING
    if _held:
        raise StoppedWhileStarting


def first_stop_only(app: Any) -> None:
    """In a worker of ``serve --workers N``: the first SIGINT or SIGTERM starts the drain,
    and the worker ignores every stop signal after it.

    Ctrl-C in a terminal signals the whole process group: each worker gets SIGINT from
    the terminal and, a moment later, SIGINT from ``serve``'s main process. Sanic stopped
    the worker's loop once per signal, and a second stop ended the drain's wait for the
    requests in flight at once, so they were cut unanswered. The drain has its own
    deadline (``server.shutdown_grace_s``) and ``serve`` kills its workers on a second
    stop signal of its own, so ignoring them here never leaves a worker running. ``serve
    --workers 1`` is its own worker and main process: there a second signal still cuts
    the drain short.

    These handlers replace the start's (:func:`stop_ends_the_start`), and a stop still
    ends the start while Sanic has not marked the worker serving (the after-start
    listeners after this one): stopping the loop then, Sanic took for a start that failed,
    with a traceback.
    """
    global _phase
    if not lifeline.is_worker():
        return
    loop = asyncio.get_running_loop()
    ends_the_start = starting()
    stopping = False

    def first() -> None:
        nonlocal stopping
        if stopping:  # two signals read at once: two calls
            return
        stopping = True
        for sig in _STOPS:
            # removed from the loop first, so that Sanic's own removal after its loop
            # stops finds nothing to restore and leaves them ignored
            loop.remove_signal_handler(sig)
            signal.signal(sig, signal.SIG_IGN)
        if ends_the_start and not app.state.is_running:
            raise StoppedWhileStarting
        app.stop(terminate=False)

    for sig in _STOPS:
        loop.add_signal_handler(sig, first)
    _phase = _NOT_STARTING
