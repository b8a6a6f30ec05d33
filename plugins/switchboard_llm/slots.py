"""A provider's call slots, shared by every server: taken before a deferred model call,
given back after it (or, the database away then, once it answers again)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time

from switchboard.plugin import Runtime

from . import store

log = logging.getLogger("switchboard.llm")

#: How long a run waits for one of its provider's calls to end before the event goes back
#: to pending: a slot a call of this process gives back is taken at once, one another
#: server's gives back within SLOT_POLL_S. Without the wait, every slot given back stood
#: idle until the postponed events were claimed again.
SLOT_WAIT_S = 0.5
SLOT_POLL_S = 0.1
#: Who holds a provider slot (for an operator reading ``llm_in_flight``).
HOLDER = f"{socket.gethostname()}:{os.getpid()}"


class Slots:
    """This process's side of ``llm_in_flight``: who waits for a slot, and the slots whose
    giving back failed."""

    def __init__(self) -> None:
        #: Per provider, set when a call of this process gives its slot back.
        self._freed: dict[str, asyncio.Event] = {}
        #: Slots not given back (the database away): given back when it answers again,
        #: else each lapses at its lease, with every provider call held back till then.
        self._stranded: dict[str, str] = {}

    async def take(self, rt: Runtime, provider: str, cap: int, lease_s: float) -> str | None:
        """One of ``provider``'s call slots, waiting up to :data:`SLOT_WAIT_S` for one to
        be given back; None past the wait."""
        if self._stranded:  # before taking one: maybe the very slot this event held
            await self.give_stranded(rt)
        deadline = time.monotonic() + SLOT_WAIT_S
        while True:
            # Taken before asking: a slot given back after the ask still wakes this wait.
            freed = self._freed.setdefault(provider, asyncio.Event())
            slot = await store.take_slot(rt, provider, cap, lease_s, HOLDER)
            left = deadline - time.monotonic()
            if slot is not None or left <= 0:
                return slot
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(freed.wait(), min(left, SLOT_POLL_S))

    async def give(self, rt: Runtime, provider: str, slot: str) -> None:
        """The call ended: its slot is free for any server (never raises). It is given
        back as a stranded one is, with any stranded before it: one path for both."""
        self._stranded[slot] = provider
        await self.give_stranded(rt)

    async def give_stranded(self, rt: Runtime) -> None:
        """The slots whose giving back failed, given back now; those that fail again stay
        for the next try (one given back after its lease lapsed frees nothing of another's:
        a slot is given back by its token)."""
        for slot in list(self._stranded):
            # taken off first: runs of this process give stranded slots back concurrently
            provider = self._stranded.pop(slot, None)
            if provider is None:
                continue
            try:
                await store.give_slot(rt, slot)
            except Exception as exc:
                self._stranded[slot] = provider
                log.warning("llm triage: slot not given back: %s", type(exc).__name__)
                return  # the database is still away: the rest wait for the next try
            self._wake(provider)

    def _wake(self, provider: str) -> None:
        freed = self._freed.pop(provider, None)
        if freed is not None:
            freed.set()  # this process's waiting runs ask at once
