"""Whether the fork server still takes its requests up: each one it is sent is acknowledged
(``TAKEN`` on the control socket), and one left unacknowledged past its due time means the
fork server is stopped or hung."""

from __future__ import annotations

import asyncio
import socket
import time
from collections import deque

from . import protocol as proto
from .limits import Limits

#: How long an overdue fork server still gets to answer before it is taken for stuck: one
#: continued a moment ago (or whose answer this loop has not read yet) answers within it.
GRACE_S = 0.2


def takeup_ms(limits: Limits) -> int:
    """How long a request may wait to be taken up (by the fork server, by a zygote): past
    every wait for it (a delivery's for its new evaluator: the event and the kill grace,
    then the compile; a refill's)."""
    return 2 * limits.compile_ms + max(limits.event_ms + limits.kill_grace_ms, 1000)


class Takeup:
    """The due times of the requests sent to the fork server and not yet acknowledged."""

    def __init__(self, within_s: float) -> None:
        self.within_s = within_s
        self._due: deque[float] = deque()

    def sent(self) -> None:
        """A request went to the fork server: it must be taken up within ``within_s``."""
        self._due.append(time.monotonic() + self.within_s)

    def clear(self) -> None:
        """A new fork server (or none): nothing is owed."""
        self._due.clear()

    def overdue(self, ctrl: socket.socket | None) -> float:
        """How long the oldest request has been left untaken past its due time (0: none).

        Reads the acknowledgements ``ctrl`` holds first (without waiting), one per request,
        in order: a fork server that was only slow, or a loop that was held up, is not
        counted against."""
        while self._due and ctrl is not None:
            try:
                said = ctrl.recv(16, socket.MSG_DONTWAIT)
            except BlockingIOError:
                break
            except OSError:
                return 0.0  # broken: the next send finds out, and starts a new one
            if said != proto.TAKEN:
                return 0.0  # it exited (EOF): as above
            self._due.popleft()
        if not self._due:
            return 0.0
        late = time.monotonic() - self._due[0]
        return late + self.within_s if late > 0 else 0.0

    async def stuck(self, ctrl: socket.socket | None) -> float:
        """:meth:`overdue`, once the fork server has had :data:`GRACE_S` more to answer
        (0: it answered). Only an overdue fork server waits: a judgement that is rare, so
        it reads the acknowledgements in one place rather than waking at the first."""
        if not self.overdue(ctrl):
            return 0.0
        await asyncio.sleep(GRACE_S)
        return self.overdue(ctrl)
