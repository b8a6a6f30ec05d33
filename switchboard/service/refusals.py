"""Refused deliveries: recorded off the response path, listed for the webhook's owner."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from .. import metrics
from ..contract.sources import reason_code
from ..errors import InvalidArgument
from ..pgtext import clean_text
from ..runtime import Runtime
from ..sanitize import sanitize_headers
from ..secrets_box import hash_token
from ..sources import Delivery, Verification, identify, usable_delivery_id
from ..store import Refusal, Row
from .common import jsonable
from .webhooks import owned_webhook

log = logging.getLogger("switchboard.ingest")

#: The most bytes of (sanitized) headers a refusal keeps, as JSON.
HEADERS_MAX_BYTES = 1024
#: The most characters of a source's words a refusal keeps.
DETAIL_MAX = 200
LIMIT_DEFAULT = 20
#: The marker a refusal's headers carry when some did not fit.
TRUNCATED = "…"


def capped_headers(delivery: Delivery) -> dict[str, str]:
    """The sanitized headers, in arrival order, as many as fit in :data:`HEADERS_MAX_BYTES`:
    secrets redacted, and a byte that is not UTF-8 (or a NUL) U+FFFD, as in an event's."""
    out: dict[str, str] = {}
    used = 2
    clean = {
        clean_text(name): clean_text(value)
        for name, value in sanitize_headers(delivery.headers).items()
    }
    for name, value in clean.items():
        cost = len(json.dumps({name: value}, ensure_ascii=False).encode()) - 1
        if used + cost > HEADERS_MAX_BYTES - 40:  # room for the marker
            out[TRUNCATED] = f"{len(clean) - len(out)} more not kept"
            break
        out[name] = value
        used += cost
    return out


def _delivery_id(source: object, delivery: Delivery) -> str | None:
    """The id the delivery says it has (unverified: only to find it again)."""
    try:
        found = identify(source, delivery.headers, delivery.body).delivery_id
    except Exception:  # a third party's identify must not cost the refusal its record
        return None
    usable = usable_delivery_id(found)
    return clean_text(usable) if usable else None


def record_refusal(
    rt: Runtime,
    webhook: Row,
    source: object,
    delivery: Delivery,
    verdict: Verification,
    source_ip: str | None,
) -> None:
    """Queue a refusal's record; never raises, never waits (the 401 goes out regardless)."""
    try:
        rt.store.refusals.add(
            Refusal(
                webhook_id=str(webhook["id"]),
                received_at=datetime.now(UTC),
                reason=reason_code(verdict.reason),
                detail=clean_text((verdict.detail or "")[:DETAIL_MAX]) or None,
                delivery_id=_delivery_id(source, delivery),
                source_ip=clean_text(source_ip)[:64] if source_ip else None,
                size=len(delivery.body),
                headers=capped_headers(delivery),
            )
        )
    except Exception:  # pragma: no cover - a bug here must cost a record, not the reply
        metrics.REFUSALS_UNRECORDED.inc()
        log.exception("could not queue a refused delivery's record")


def refusal_view(row: Row) -> dict[str, Any]:
    return dict(
        jsonable(
            {
                "received_at": row["received_at"],
                "reason": row["reason"],
                "detail": row.get("detail"),
                "delivery_id": row.get("delivery_id"),
                "source_ip": row.get("source_ip"),
                "size": row["size"],
                "headers": row.get("headers") or {},
            }
        )
    )


async def list_refusals(
    rt: Runtime, caller: Row | None, webhook_id: str, *, limit: int | None = None
) -> dict[str, Any]:
    """The webhook's recorded refusals, newest first, with how many there were in all.

    ``caller`` None is the operator (the CLI); otherwise only the webhook's owner.
    """
    await owned_webhook(rt, caller, webhook_id)
    kept = rt.store.refusals.keep
    size = LIMIT_DEFAULT if limit is None else limit
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= max(kept, 1):
        raise InvalidArgument(f"limit: must be an integer from 1 to {max(kept, 1)}")
    rows, count = await rt.store.list_refusals(webhook_id, size)
    return {
        "webhook_id": webhook_id,
        "total": int(count["total"]) if count else 0,
        "last_at": jsonable(count["last_at"]) if count else None,
        "kept": kept,
        "refusals": [refusal_view(r) for r in rows],
    }


async def refusal_of_delivery(rt: Runtime, token: str, delivery_id: str) -> dict[str, Any] | None:
    """What was recorded for the refused delivery ``delivery_id`` to the ingest ``token``.

    What ``switchboard send`` shows its operator; None when nothing (yet) is recorded.
    """
    webhook = await rt.store.resolve_webhook(hash_token(token))
    if webhook is None:
        return None
    row = await rt.store.find_refusal(str(webhook["id"]), clean_text(delivery_id))
    return None if row is None else refusal_view(row)
