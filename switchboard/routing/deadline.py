"""An awaitable under a deadline, whose timer is set only once it has to wait."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Generator
from typing import Any, TypeVar

T = TypeVar("T")


async def within(call: Awaitable[T], timeout_s: float) -> T:
    """``await call`` under ``timeout_s`` (:class:`TimeoutError` past it), as
    ``asyncio.timeout`` would, counted from now.

    Most stages answer without waiting on anything (a webhook with no rules, a deferred
    stage's ``defers``): ``call`` runs its first step here, and one that finishes in it
    needs no timer. One that suspends is resumed under ``asyncio.timeout_at`` the
    deadline set before it started; a step that does not suspend cannot be interrupted
    by any timer anyway.
    """
    deadline = asyncio.get_running_loop().time() + timeout_s
    try:
        steps = call.__await__()
    except AttributeError:
        return await call  # not awaitable: the TypeError ``await`` raises, as before
    try:
        first = steps.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    async with asyncio.timeout_at(deadline):
        return await _Rest(steps, first)


class _Rest:
    """The remaining steps of an awaitable that already took its first: what it yields goes
    to the task, what the task sends or throws goes back into it."""

    __slots__ = ("_steps", "_first")

    def __init__(self, steps: Generator[Any, Any, Any], first: Any) -> None:
        self._steps = steps
        self._first = first

    def __await__(self) -> Generator[Any, Any, Any]:
        steps, value = self._steps, self._first
        while True:
            try:
                sent = yield value
            except GeneratorExit:
                steps.close()
                raise
            except BaseException as exc:  # a cancellation, the timeout's among them
                try:
                    value = steps.throw(exc)
                except StopIteration as done:
                    return done.value
            else:
                try:
                    value = steps.send(sent)
                except StopIteration as done:
                    return done.value
