"""The fork server's (re)starts: one at a time, shared, and spaced out after failures."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from .limits import SandboxUnavailable

#: After a failed start, none other for this long; each failure in a row doubles it, up to
#: :data:`BACKOFF_MAX_S`. Long enough that a fork server dying (or hanging) at every start
#: is not started again by every delivery; short enough that one that recovers is soon used.
BACKOFF_S = 0.5
BACKOFF_MAX_S = 5.0


@dataclass
class Backoff:
    """When the next start may be tried, after ``failures`` in a row (times: the caller's)."""

    failures: int = 0
    until: float = 0.0

    def failed(self, now: float) -> None:
        self.failures += 1
        self.until = now + min(BACKOFF_S * 2 ** (self.failures - 1), BACKOFF_MAX_S)

    def succeeded(self) -> None:
        self.failures, self.until = 0, 0.0


def _retrieved(task: asyncio.Task[None]) -> None:
    """A start nobody waits for any more: its failure is the next request's to meet."""
    if not task.cancelled():
        task.exception()


class Restarts:
    """The fork server's (re)start under way, shared by whoever needs it meanwhile.

    One at a time, and never cancelled by a request that stops waiting for it (at its own
    deadline): a slow start still completes for the next request, rather than each request
    killing and starting it again. After a failed start, requests fail at once (a
    :class:`SandboxUnavailable`) until its :class:`Backoff` has passed, rather than each
    paying a start of its own; a start that succeeds resets it.
    """

    def __init__(self, start: Callable[[], Awaitable[None]]) -> None:
        self._start = start
        self._task: asyncio.Task[None] | None = None
        self.backoff = Backoff()

    async def wait(self) -> None:
        """Join the start under way, or begin one (raises when it fails, or backs off)."""
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done():
            if loop.time() < self.backoff.until:
                raise SandboxUnavailable("the routing sandbox did not start; retrying shortly")
            self._task = loop.create_task(self._run())
            self._task.add_done_callback(_retrieved)
        await asyncio.shield(self._task)

    async def _run(self) -> None:
        try:
            await self._start()
        except Exception:  # never a cancellation (the sandbox closing): that is no failure
            self.backoff.failed(asyncio.get_running_loop().time())
            raise
        self.backoff.succeeded()

    def cancel(self) -> None:
        """Stop the start under way (the sandbox closing)."""
        if self._task is not None:
            self._task.cancel()
