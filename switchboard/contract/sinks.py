"""What a sink is handed besides the runtime (the committed event and the todos it made),
and what a sink that rings at commit declares instead."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

#: The longest channel name PostgreSQL takes (an identifier: ``NAMEDATALEN - 1`` bytes).
CHANNEL_MAX_BYTES = 63


class SinkEvent(TypedDict):
    """The stored event a sink receives (read-only by convention; bytes as stored).

    ``headers`` are the sanitized producer headers; ``raw_headers`` the header block as
    received (secret values redacted); ``body`` the raw body bytes; ``external_id`` the
    idempotency key (``<webhook id>:<delivery id>``); ``disposition`` ``routed`` (sinks
    never see a drop); ``routing_trace`` the trace (``schemas/trace.schema.json``);
    ``envelope`` the envelope the routing stages saw, its projections' keys included (a live
    delivery's and a deferred decision's; a sink handed an event from elsewhere may not get it).
    """

    id: str
    webhook_id: str
    source: str
    kind: str | None
    external_id: str
    headers: dict[str, str]
    raw_headers: bytes
    body: bytes
    content_type: str | None
    size: int
    verified: bool
    trust_mode: str
    verify_detail: str | None
    routing_trace: dict[str, Any]
    disposition: str
    envelope: NotRequired[dict[str, Any]]


class SinkTodo(TypedDict):
    """A todo this delivery created: its id, the endpoint it is for and its queue."""

    id: str
    endpoint_id: str
    queue: str
    created: bool


@dataclass(frozen=True)
class CommitNotify:
    """A sink's ``at_commit``: ``NOTIFY <channel>, '<endpoint_id>:<queue>'`` for each endpoint
    and queue a transaction gives new todos, sent by PostgreSQL from that transaction.

    Listeners hear it when the todos commit, and never when they roll back: the ring costs
    the delivery no round trip of its own. ``rung``, if given, is called after each commit
    with the number of notifications it sent (a counter's ``inc``).
    """

    channel: str
    rung: Callable[[int], None] | None = None
