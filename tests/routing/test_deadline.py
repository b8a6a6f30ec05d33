"""``within``: an answer without waiting sets no timer; one that waits keeps the deadline,
its cancellation and its errors exactly as ``asyncio.timeout`` around ``await`` would."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from switchboard.routing.deadline import within


class _Timers:
    """Counts the timers the running loop is asked for."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.count = 0
        self._call_at = loop.call_at
        loop.call_at = self._counted  # type: ignore[method-assign]

    def _counted(self, *args: Any, **kwargs: Any) -> Any:
        self.count += 1
        return self._call_at(*args, **kwargs)


async def test_an_answer_without_waiting_sets_no_timer() -> None:
    timers = _Timers(asyncio.get_running_loop())

    async def answer() -> str:
        return "now"

    assert await within(answer(), 5) == "now"
    assert timers.count == 0


async def test_an_answer_after_waiting_is_returned_under_one_timer() -> None:
    timers = _Timers(asyncio.get_running_loop())

    async def later() -> str:
        await asyncio.sleep(0)
        await asyncio.sleep(0.01)
        return "later"

    assert await within(later(), 5) == "later"
    assert timers.count >= 1  # the deadline's (and the sleep's own)


async def test_a_wait_past_the_deadline_raises_timeout_and_cancels_the_call() -> None:
    cancelled = asyncio.Event()

    async def stuck() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimeoutError):
        await within(stuck(), 0.05)
    assert loop.time() - started < 2
    assert cancelled.is_set()


async def test_the_deadline_counts_from_the_call_not_from_its_first_wait() -> None:
    async def busy_then_wait() -> None:
        end = asyncio.get_running_loop().time() + 0.1
        while asyncio.get_running_loop().time() < end:  # a first step of 100 ms on the CPU
            pass
        await asyncio.sleep(0.08)  # 180 ms in all: past a 150 ms deadline

    with pytest.raises(TimeoutError):
        await within(busy_then_wait(), 0.15)


async def test_errors_raised_before_and_after_the_first_wait_propagate() -> None:
    async def at_once() -> None:
        raise ValueError("first step")

    async def after() -> None:
        await asyncio.sleep(0)
        raise KeyError("second step")

    with pytest.raises(ValueError, match="first step"):
        await within(at_once(), 5)
    with pytest.raises(KeyError, match="second step"):
        await within(after(), 5)


async def test_cancelling_the_caller_cancels_the_call() -> None:
    seen: list[str] = []

    async def slow() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    task = asyncio.create_task(within(slow(), 30))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["cancelled"]


async def test_values_sent_back_and_futures_reach_the_call() -> None:
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[int] = loop.create_future()
    loop.call_later(0.01, fut.set_result, 41)

    async def wait_for_it() -> int:
        return await fut + 1

    assert await within(wait_for_it(), 5) == 42
    assert await within(fut, 5) == 41  # a future already done: no wait at all


async def test_a_call_that_is_not_awaitable_fails_as_await_does() -> None:
    with pytest.raises(TypeError):
        await within(42, 5)  # type: ignore[arg-type]
