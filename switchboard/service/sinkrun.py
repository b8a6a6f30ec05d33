"""The sinks' turn: after commit, off the response path, one task per turn of the event loop."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, cast

from ..contract.sinks import SinkEvent, SinkTodo
from ..errors import StoreUnavailable
from ..runtime import Runtime
from .observe import sink_failed

log = logging.getLogger("switchboard.ingest")

#: What one turn hands the sinks: each committed event with the todos it created.
Batch = list[tuple[SinkEvent, list[SinkTodo]]]

_background: set[asyncio.Task[None]] = set()
#: The turn still taking rings, by runtime (a group commit wakes its deliveries in one
#: turn of the loop: their rings go to one task rather than a task each).
_open: dict[int, _Turn] = {}


def ring_sinks(rt: Runtime, event: dict[str, Any], created: list[dict[str, Any]]) -> None:
    """The sinks (the doorbell) for the todos a committed decision ``created``, if any."""
    ring_sinks_many(rt, [(event, created)])


def ring_sinks_many(rt: Runtime, rings: list[tuple[dict[str, Any], list[dict[str, Any]]]]) -> None:
    """:func:`ring_sinks` for each (event, created) pair: added to this turn's task.

    Sinks rung at commit (``at_commit``: the doorbell) are not called: the transaction that
    created the todos rang them (``store.rings``)."""
    if not rt.registries.sinks.called():
        return
    batch: Batch = [
        (
            cast(SinkEvent, event),
            [
                SinkTodo(
                    id=str(t["id"]),
                    endpoint_id=str(t["endpoint_id"]),
                    queue=t["queue"],
                    created=True,
                )
                for t in created
            ],
        )
        for event, created in rings
        if created
    ]
    if not batch:
        return
    loop = asyncio.get_running_loop()
    turn = _open.get(id(rt))
    if turn is None or not turn.open(rt, loop):
        turn = _Turn(rt, loop)
        _open[id(rt)] = turn
        task = loop.create_task(turn.run())
        _background.add(task)
        task.add_done_callback(_background.discard)
    turn.batch += batch


async def drain_sinks(within_s: float | None = None) -> None:
    """Wait for in-flight sink calls (used at shutdown so no sink call is cut short), for
    at most ``within_s`` (a hung sink must not hold the stop for ever): those still
    running then are cancelled, with one warning."""
    loop = asyncio.get_running_loop()
    deadline = None if within_s is None else loop.time() + within_s
    while _background:
        # Finished ones are dropped here, not only by their done callbacks: those are
        # merely scheduled, and waiting for finished tasks would spin without yielding.
        _background.difference_update([t for t in _background if t.done()])
        running = list(_background)
        if not running:
            return
        left = None if deadline is None else max(0.0, deadline - loop.time())
        done, still = await asyncio.wait(running, timeout=left)
        _background.difference_update(done)
        if still and deadline is not None and loop.time() >= deadline:
            log.warning(
                "shutdown: %d sink call(s) still running after %g s were cut short",
                len(still),
                within_s,
            )
            for task in still:
                task.cancel()
            await asyncio.gather(*still, return_exceptions=True)
            _background.difference_update(still)
            return


class _Turn:
    """The rings of one turn of the loop: taken until its task starts, then run.

    A sink with ``deliver_many(runtime, batch)`` is called once for the turn's events; any
    other sink once per event, each event in its own task as before (a slow sink does not
    hold the next delivery's call back).
    """

    def __init__(self, rt: Runtime, loop: asyncio.AbstractEventLoop) -> None:
        self.rt = rt
        self.loop = loop
        self.batch: Batch = []
        self.started = False
        self.sinks = rt.registries.sinks.called()  # those of the turn's first ring

    def open(self, rt: Runtime, loop: asyncio.AbstractEventLoop) -> bool:
        return not self.started and self.rt is rt and self.loop is loop

    async def run(self) -> None:
        self.started = True
        if _open.get(id(self.rt)) is self:
            del _open[id(self.rt)]
        rt, batch = self.rt, self.batch
        together: list[Any] = []
        each: list[Any] = []
        for sink in self.sinks:
            if callable(getattr(sink, "deliver_many", None)):
                together.append(sink)
            else:
                each.append(sink)
        if each:
            for event, todos in batch:
                task = self.loop.create_task(_each(rt, each, event, todos))
                _background.add(task)
                task.add_done_callback(_background.discard)
        for sink in together:
            await _call(rt, sink, partial(sink.deliver_many, rt, batch))


async def _each(rt: Runtime, sinks: list[Any], event: SinkEvent, todos: list[SinkTodo]) -> None:
    for sink in sinks:
        await _call(rt, sink, partial(sink.deliver, rt, event, todos))


async def _call(rt: Runtime, sink: Any, call: Callable[[], Awaitable[None]]) -> None:
    """One sink call; a failure is logged with its plugin's name and counted, never raised."""
    try:
        await call()
    except StoreUnavailable as exc:
        # An outage is expected and said elsewhere: a line, not a traceback.
        sink_failed(sink.name)
        log.warning(
            "sink %r (plugin %r) failed: %s", sink.name, rt.registries.sinks.owner(sink.name), exc
        )
    except Exception:
        sink_failed(sink.name)
        log.exception("sink %r (plugin %r) failed", sink.name, rt.registries.sinks.owner(sink.name))
