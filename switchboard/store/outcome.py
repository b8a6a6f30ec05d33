"""What a delivery's write came to, and the ``once`` claim a write may carry."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..routing.model import DISPOSITION_DROPPED, DISPOSITION_PENDING, DISPOSITION_REPEAT
from .db import Row


@dataclass
class DeliveryOutcome:
    """What one delivery transaction did."""

    event_id: str
    new_event: bool
    dropped: bool
    todos: list[Row] = field(default_factory=list)  # id, endpoint_id, queue, created
    #: A ``once`` action whose claim another event holds: no todo was made.
    repeat: bool = False
    #: Stored ``pending``: a deferred stage decides it later (no todo yet).
    pending: bool = False
    #: Nothing stored: the delivery was resolved from a kept resolution that a change has
    #: made stale; the resolve epoch is now this (see ``store.rescache``).
    stale_epoch: int | None = None


class StaleResolution(Exception):
    """A delivery resolved from a kept resolution that a change has made stale: nothing of
    it was stored; resolve it afresh and route it again (``service.ingest``)."""


@dataclass(frozen=True)
class OnceClaim:
    """Claim ``key`` for the webhook in the delivery's transaction (``routing_once``).

    ``repeat_trace`` is what the event stores instead of its trace when another event
    already holds the claim.
    """

    webhook_id: str
    key: str
    repeat_trace: dict[str, Any]
    #: The lane's ``once_ttl_s``: the claim expires after so long (None: until released).
    ttl_s: int | None = None

    def params(self, event_id: str) -> dict[str, Any]:
        """:data:`ONCE_CLAIM`'s parameters for ``event_id``'s claim."""
        return {"webhook_id": self.webhook_id, "key": self.key, "event_id": event_id,
                "ttl": self.ttl_s}  # fmt: skip


# The at-most-once claim, in the delivery's transaction. DO UPDATE rather than DO NOTHING so
# RETURNING always yields the holder's event id: ours when the claim is new (or the old one
# had expired: its lane's TTL), the first claimant's otherwise. A concurrent claim of the
# same key waits on the row lock until the holder's transaction ends, so two deliveries can
# never both hold it.
ONCE_CLAIM = """
    INSERT INTO routing_once AS o (webhook_id, once_key, event_id, expires_at)
    VALUES (%(webhook_id)s, %(key)s, %(event_id)s,
            now() + make_interval(secs => %(ttl)s::float8))
    ON CONFLICT (webhook_id, once_key) DO UPDATE SET
        event_id = CASE WHEN o.expires_at <= now() THEN EXCLUDED.event_id ELSE o.event_id END,
        created_at = CASE WHEN o.expires_at <= now() THEN now() ELSE o.created_at END,
        expires_at = CASE WHEN o.expires_at <= now() THEN EXCLUDED.expires_at
                          ELSE o.expires_at END
    RETURNING event_id
"""


def redelivery_outcome(event_id: str, disposition: str, todos: list[Row]) -> DeliveryOutcome:
    """A redelivery reports the first delivery: its todos (not created now), or its drop or
    repeat, or that it is still pending."""
    if disposition == DISPOSITION_PENDING:
        return DeliveryOutcome(str(event_id), False, False, pending=True)
    if disposition == DISPOSITION_DROPPED:
        return DeliveryOutcome(str(event_id), False, True)
    if disposition == DISPOSITION_REPEAT:
        return DeliveryOutcome(str(event_id), False, False, repeat=True)
    return DeliveryOutcome(str(event_id), False, False, [{**t, "created": False} for t in todos])
