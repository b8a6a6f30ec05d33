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


@dataclass(frozen=True)
class OnceClaim:
    """Claim ``key`` for the webhook in the delivery's transaction (``routing_once``).

    ``repeat_trace`` is what the event stores instead of its trace when another event
    already holds the claim.
    """

    webhook_id: str
    key: str
    repeat_trace: dict[str, Any]


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
