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
from .common import clip, jsonable
from .todos import browsed_view
from .webhooks import owned_webhook

LIMIT_DEFAULT, LIMIT_MAX = 20, 100
#: The most characters of a body that is not JSON :func:`show_event` shows.
PREVIEW_CHARS = 2000


def _webhook_of(row: Row) -> Any:
    """The webhook an event came in on, deleted since or not."""
    return row.get("webhook_id") or row.get("deleted_webhook_id")


def event_view(row: Row) -> dict[str, Any]:
    """An event as listed and shown; a pending one (when its row says) also has
    ``waiting_s``: the seconds since it was received, to one decimal."""
    view = dict(
        jsonable(
            {
                "event_id": row["id"],
                "webhook_id": _webhook_of(row),
                "source": row.get("source"),
                "kind": row.get("kind"),
                "verified": row.get("verified"),
                "trust_mode": row.get("trust_mode"),
                "size": row.get("size"),
                "content_type": row.get("content_type"),
                "received_at": row.get("received_at"),
                "disposition": row.get("disposition"),
                "routing_trace": row.get("routing_trace"),
            }
        )
    )
    if row.get("waiting_s") is not None:
        view["waiting_s"] = round(float(row["waiting_s"]), 1)
    return view


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
    rt: Runtime,
    caller: Row | None,
    webhook_id: str,
    *,
    disposition: str | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> dict[str, Any]:
    """The webhook's events, newest first, one page at a time (a deleted webhook's too:
    they stay, and the answer says when it was deleted)."""
    hook = await owned_webhook(rt, caller, webhook_id, deleted=True)
    if disposition is not None and disposition not in DISPOSITIONS:
        raise InvalidArgument(f"disposition: must be one of {', '.join(DISPOSITIONS)}")
    size = LIMIT_DEFAULT if limit is None else limit
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= LIMIT_MAX:
        raise InvalidArgument(f"limit: must be an integer from 1 to {LIMIT_MAX}")
    before = decode_cursor(cursor) if cursor else None
    rows = await rt.store.list_events(
        hook["id"],
        disposition=disposition,
        limit=size + 1,
        before=before,
        deleted=hook.get("deleted_at") is not None,
    )
    page = rows[:size]
    out: dict[str, Any] = {"webhook_id": hook["id"], "events": [event_view(r) for r in page]}
    if hook.get("deleted_at") is not None:
        out["webhook_deleted_at"] = jsonable(hook["deleted_at"])
    out["next_cursor"] = encode_cursor(page[-1]) if len(rows) > size else None
    return out


async def get_event(
    rt: Runtime, caller: Row | None, webhook_id: str, event_id: str
) -> dict[str, Any]:
    """One event with its sanitized headers and parsed payload; another webhook's is not found."""
    hook = await owned_webhook(rt, caller, webhook_id, deleted=True)
    row = await rt.store.get_event(event_id)
    if row is None or _webhook_of(row) != hook["id"]:
        raise NotFound(f"event {clip(event_id)} not found")
    view = event_view(row)
    view["headers"] = row.get("headers") or {}
    view["payload"] = parse_payload(bytes(row["body"]))
    return view


def payload_view(body: bytes) -> dict[str, Any]:
    """The body for reading: its JSON value, or a text preview of what is not JSON.

    ``payload_format`` is ``json``, ``text`` (``payload`` is the first :data:`PREVIEW_CHARS`
    characters, undecodable bytes replaced; ``payload_truncated`` says whether there was
    more) or ``empty``. Never the bytes themselves.
    """
    value = parse_payload(body)
    if value is not None or body.strip() == b"null":
        return {"payload_format": "json", "payload": value}
    if not body.strip():
        return {"payload_format": "empty", "payload": None}
    text = body.decode("utf-8", errors="replace")
    return {
        "payload_format": "text",
        "payload": text[:PREVIEW_CHARS],
        "payload_truncated": len(text) > PREVIEW_CHARS,
    }


async def show_event(rt: Runtime, caller: Row | None, event_id: str) -> dict[str, Any]:
    """One event by its id alone: its view, sanitized headers, payload and the todos it made.

    ``caller`` None is the operator (any event); an endpoint sees only its human's webhooks'
    events, another's is exactly not found. Each todo carries its endpoint, queue and state.
    """
    # One snapshot: a deferred decision committing between the reads would show the event
    # pending beside the todos it made (or decided without them).
    async with rt.store.db.snapshot():
        row = await rt.store.get_event(event_id)
        if row is not None and caller is not None:
            try:
                await owned_webhook(rt, caller, str(_webhook_of(row) or ""), deleted=True)
            except NotFound:
                row = None
        if row is None:
            raise NotFound(f"event {clip(event_id)} not found")
        todos = await rt.store.todos_of_event(row["id"])
    view = event_view(row)
    view["headers"] = row.get("headers") or {}
    view.update(payload_view(bytes(row["body"])))
    view["todos"] = [browsed_view(t) for t in todos]
    return view
