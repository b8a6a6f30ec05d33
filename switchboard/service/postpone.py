"""A deferred run's "not yet": its event given back to pending, through a database outage."""

from __future__ import annotations

import asyncio
import logging
import time

from ..errors import StoreUnavailable
from ..store import Store

log = logging.getLogger("switchboard.triage")

#: How soon a postponement the database did not take is tried again.
RETRY_S = 0.5


async def postpone(
    store: Store, stage: str, event_id: str, owner: str, after_s: float, until: float
) -> bool | None:
    """Give ``event_id``'s lease back, to be claimed again after ``after_s``, its attempt
    uncounted; the database away, try again every :data:`RETRY_S` until ``until``
    (``time.monotonic()``: when the lease runs out).

    A stage's "not yet" is often that very outage (the host turns a deferred stage's
    :class:`StoreUnavailable` into one), so a postponement written once would often be
    lost, the lease kept until it ran out, and the next claim would count an attempt for a
    run that decided nothing: enough outages and the event took the default as stalled.
    Trying again past the lease is harmless (the write names the lease's owner), and not
    needed: the next claim then counts the attempt, as for a worker that died.

    True: postponed; False: the lease was no longer this worker's; None: the database did
    not answer before ``until`` (the lease runs out: an attempt).
    """
    failed = 0
    while True:
        try:
            done = await store.postpone_pending(event_id, owner, after_s)
        except StoreUnavailable as exc:
            failed += 1
            if time.monotonic() + RETRY_S >= until:
                log.warning(
                    "triage %s: event %s not postponed, the database is unavailable (%s):"
                    " claimed again when its lease runs out",
                    stage,
                    event_id,
                    exc.detail or exc,
                )
                return None
            if failed == 1:
                log.warning(
                    "triage %s: event %s not postponed yet, the database is unavailable"
                    " (%s): trying again until its lease runs out",
                    stage,
                    event_id,
                    exc.detail or exc,
                )
            await asyncio.sleep(RETRY_S)
            continue
        if failed:
            log.info(
                "triage %s: event %s postponed once the database answered (%d tries),"
                " its attempt given back",
                stage,
                event_id,
                failed + 1,
            )
        return done
