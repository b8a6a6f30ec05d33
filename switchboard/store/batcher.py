"""Group work of concurrent requests: a flusher per event loop takes everything waiting."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from .. import metrics
from ..errors import StoreUnavailable

T = TypeVar("T")
R = TypeVar("R")

#: What a flush answers: one result or one exception per item, in the items' order.
Flush = Callable[[Sequence[T]], Awaitable[Sequence["R | BaseException"]]]


@dataclass
class _LoopState(Generic[T, R]):
    loop: asyncio.AbstractEventLoop
    waiting: list[tuple[T, asyncio.Future[R]]] = field(default_factory=list)
    #: The tasks flushing what waits (at most ``flights``, less one while ``inline``).
    flushers: set[asyncio.Task[None]] = field(default_factory=set)
    #: A caller is flushing its own lone item in its own task (see ``submit``).
    inline: bool = False


class Batcher(Generic[T, R]):
    """Items submitted while a flush runs go together into the next one.

    Nothing waits on a timer: a lone item (nothing waiting, no flush running) is flushed
    by its own caller after one turn of the loop (items submitted in that turn join it),
    and batches grow only because items arrive while the previous flush is in the
    database; those are flushed by a task of their own. At most
    ``max_size`` items go into one flush. A flush that raises fails every item of its
    batch with that exception; a flush that must spare innocent items answers per item
    instead (see ``store.events``). A flush that fails with StoreUnavailable fails the
    items waiting for the next one with it too: they would wait a whole second deadline
    for the same answer (README: every request answers within ``database_timeout_ms``).

    ``flights``: how many flushes may be under way at once (a lone caller's, from its turn
    of the loop on, is one of them). With one, a worker's requests and its flushes take
    turns when every client waits on the same flush: the database idles while the worker
    makes the next batch, and the worker while the database commits. With two, an item
    submitted while only one flush is under way starts another at once (a lone caller
    then keeps its own item to itself): the next batch goes to the database while the
    worker still answers the last one. Batches get smaller, and the worker and the
    database work at the same time (bench/README.md, ``[ingest] writes_in_flight``).

    The state is per event loop, so a runtime used from several loops (tests, the CLI)
    never mixes their futures.
    """

    def __init__(self, flush: Flush[T, R], *, max_size: int, step: str, flights: int = 1) -> None:
        if max_size < 1:
            raise ValueError("max_size must be at least 1")
        if flights < 1:
            raise ValueError("flights must be at least 1")
        self._flush = flush
        self.max_size = max_size
        self.flights = flights
        self._step = step
        self._state: _LoopState[T, R] | None = None

    def _here(self) -> _LoopState[T, R]:
        loop = asyncio.get_running_loop()
        if self._state is None or self._state.loop is not loop:
            self._state = _LoopState(loop)
        return self._state

    async def submit(self, item: T) -> R:
        """``item``'s result once the flush that took it has finished."""
        state = self._here()
        if not state.flushers and not state.inline and not state.waiting:
            return await self._alone(state, item)
        future: asyncio.Future[R] = state.loop.create_future()
        # Read the outcome even when the caller has gone, so an abandoned item's failure
        # is not reported again as "never retrieved".
        future.add_done_callback(_consume)
        state.waiting.append((item, future))
        self._start(state)
        # Shielded: a caller that gives up (client gone) must not cancel the flush that
        # carries other callers' items; its own item is still written (and deduplicated
        # when the producer retries).
        return await asyncio.shield(future)

    async def _alone(self, state: _LoopState[T, R], item: T) -> R:
        """Flush a lone item in the caller's own task: no task to start, so an idle server
        pays one turn of the loop for batching. Items arriving during that turn join it (see
        :meth:`_lead`), unless one of them started a flush of its own (``flights`` above
        one); items arriving during its flush wait and are flushed together by a task.
        Cancelling a lone caller cancels only its own item's flush (it carries nobody
        else's)."""
        state.inline = True
        try:
            # One turn of the loop first: the tasks woken with this one (a resolve batch
            # answered, a sandbox frame answered together) submit meanwhile, and all go in
            # one flush instead of this one alone and theirs after it.
            await asyncio.sleep(0)
            if state.waiting and not state.flushers:
                return await self._lead(state, item)
            metrics.STORE_BATCH.labels(self._step).observe(1)
            [result] = await self._flush([item])
        except StoreUnavailable as exc:
            self._fail_waiting(state, exc)
            raise
        finally:
            state.inline = False
            if state.waiting:
                self._start(state)
        if isinstance(result, BaseException):
            raise result
        return result

    async def _lead(self, state: _LoopState[T, R], item: T) -> R:
        """``item`` first in the batch of those that joined it during its turn of the loop,
        flushed by a task (it carries others' items now, so its caller may not cancel it)."""
        future: asyncio.Future[R] = state.loop.create_future()
        future.add_done_callback(_consume)
        state.waiting.insert(0, (item, future))
        state.inline = False
        self._start(state)
        return await asyncio.shield(future)

    def _start(self, state: _LoopState[T, R]) -> None:
        """A flusher for what waits, unless ``flights`` flushes are under way already (each
        flusher takes what waits until nothing does)."""
        if len(state.flushers) + state.inline < self.flights:
            state.flushers.add(state.loop.create_task(self._run(state)))

    async def _run(self, state: _LoopState[T, R]) -> None:
        try:
            while state.waiting:
                batch = state.waiting[: self.max_size]
                del state.waiting[: self.max_size]
                metrics.STORE_BATCH.labels(self._step).observe(len(batch))
                try:
                    results = await self._flush([item for item, _ in batch])
                    if len(results) != len(batch):
                        raise RuntimeError(
                            f"{self._step} flush answered {len(results)} of {len(batch)} items"
                        )
                except BaseException as exc:  # noqa: BLE001 - handed to every waiter
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    if isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt, SystemExit)):
                        self._fail_waiting(state, exc)
                        raise
                    if isinstance(exc, StoreUnavailable):
                        self._fail_waiting(state, exc)
                    continue
                for (_, future), result in zip(batch, results, strict=True):
                    if future.done():
                        continue
                    if isinstance(result, BaseException):
                        future.set_exception(result)
                    else:
                        future.set_result(result)
        finally:
            task = asyncio.current_task()
            if task is not None:
                state.flushers.discard(task)

    @staticmethod
    def _fail_waiting(state: _LoopState[T, R], exc: BaseException) -> None:
        for _, future in state.waiting:
            if not future.done():
                future.set_exception(exc)
        state.waiting.clear()


def _consume(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()
