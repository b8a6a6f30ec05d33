"""A webhook's stored deliveries for its owner: list them newest first, read one back."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
from typing import Any

from ..errors import InvalidArgument, NotFound
from ..routing.envelope import parse_payload
from ..routing.model import DISPOSITIONS
from ..runtime import Runtime
from ..store import Row
from ..store.db import is_uuid
from .common import jsonable
from .webhooks import owned_webhook

LIMIT_DEFAULT, LIMIT_MAX = 20, 100


def event_view(row: Row) -> dict[str, Any]:
    return dict(jsonable({
        "event_id": row["id"],
        "webhook_id": row.get("webhook_id"),
        "source": row.get("source"),
        "kind": row.get("kind"),
        "verified": row.get("verified"),
        "trust_mode": row.get("trust_mode"),
        "size": row.get("size"),
        "content_type": row.get("content_type"),
        "received_at": row.get("received_at"),
        "disposition": row.get("disposition"),
        "routing_trace": row.get("routing_trace"),
    }))


def encode_cursor(row: Row) -> str:
    """An opaque keyset cursor: the last row's (received_at, id)."""
    raw = json.dumps([row["received_at"].isoformat(), row["id"]]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[dt.datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        stamp, event_id = json.loads(raw)
        when = dt.datetime.fromisoformat(stamp)
    except (ValueError, TypeError, binascii.Error):
        raise InvalidArgument("cursor: not a cursor this tool returned") from None
    if not is_uuid(event_id) or when.tzinfo is None:
        raise InvalidArgument("cursor: not a cursor this tool returned")
    return when, event_id


async def list_events(
    rt: Runtime, caller: Row | None, webhook_id: str, *, disposition: str | None = None,
    limit: int | None = None, cursor: str | None = None,
) -> dict[str, Any]:
    """The webhook's events, newest first, one page at a time."""
    hook = await owned_webhook(rt, caller, webhook_id)
    if disposition is not None and disposition not in DISPOSITIONS:
        raise InvalidArgument(f"disposition: must be one of {', '.join(DISPOSITIONS)}")
    size = LIMIT_DEFAULT if limit is None else limit
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= LIMIT_MAX:
        raise InvalidArgument(f"limit: must be an integer from 1 to {LIMIT_MAX}")
    before = decode_cursor(cursor) if cursor else None
    rows = await rt.store.list_events(
        hook["id"], disposition=disposition, limit=size + 1, before=before
    )
    page = rows[:size]
    out: dict[str, Any] = {"webhook_id": hook["id"], "events": [event_view(r) for r in page]}
    out["next_cursor"] = encode_cursor(page[-1]) if len(rows) > size else None
    return out


async def get_event(
    rt: Runtime, caller: Row | None, webhook_id: str, event_id: str
) -> dict[str, Any]:
    """One event with its sanitized headers and parsed payload; another webhook's is not found."""
    hook = await owned_webhook(rt, caller, webhook_id)
    row = await rt.store.get_event(event_id)
    if row is None or row.get("webhook_id") != hook["id"]:
        raise NotFound(f"event {event_id} not found")
    view = event_view(row)
    view["headers"] = row.get("headers") or {}
    view["payload"] = parse_payload(bytes(row["body"]))
    return view
