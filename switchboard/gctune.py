"""The garbage collector's setting for a long-running worker: start-up frozen, young collections rarer."""

from __future__ import annotations

import gc

#: Net container allocations between two young collections (Python's default is 700). A
#: delivery or a re-routed event allocates a few hundred containers (its parsed payload,
#: envelope, trace) that nearly all die by reference counting; at 700 the collector ran
#: every couple of events and, with a re-route batch's envelopes alive across its write,
#: promoted them into full collections: 0.96 s of a 5.2 s, 10,000-event apply
#: (bench/history.py --mode reroute). At 10,000 a young collection walks ~10,000 objects
#: (~3 ms) about 15 times less often.
YOUNG_THRESHOLD = 10_000


def settle() -> None:
    """Freeze what start-up made (it lives as long as the worker, so a full collection
    need not walk it again) and space the young collections out (:data:`YOUNG_THRESHOLD`)."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
