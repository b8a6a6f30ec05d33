"""When this process last took a live delivery: work behind the producers (a re-route's
apply) paces itself while they are coming, so they keep the CPU and the database."""

from __future__ import annotations

import time

#: A delivery within this long makes ingest "busy".
BUSY_WITHIN_S = 0.5
#: While ingest is busy, background work rests this many times as long as its last batch
#: took (so it gets about a fifth of the time it would take alone).
PACE = 4.0

_last = [float("-inf")]


def delivered(at: float) -> None:
    """Note a live delivery's arrival (``time.monotonic()``)."""
    _last[0] = at


def busy(within_s: float = BUSY_WITHIN_S) -> bool:
    """True when a live delivery arrived in the last ``within_s`` seconds."""
    return time.monotonic() - _last[0] < within_s


def rest_for(batch_s: float) -> float:
    """How long background work that just spent ``batch_s`` on a batch should rest."""
    return PACE * batch_s if busy() else 0.0
