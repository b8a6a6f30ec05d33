"""The ``cairn`` source: ``X-Cairn-Signature``, then the signed body's id and clock."""

from __future__ import annotations

import json
import re
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from switchboard.plugin import (
    REASON_ID_MISMATCH,
    REASON_MALFORMED,
    REASON_STALE_TIMESTAMP,
    TRUST_SIGNED,
    Delivery,
    Headers,
    Identity,
    Verification,
    body_key,
    constant_time_equal,
    delivery_id_key,
    prefixed_signature,
    prefixed_signature_refusal,
)

SIGNATURE_HEADER = "X-Cairn-Signature"
EVENT_ID_HEADER = "X-Cairn-Event-Id"
EVENT_HEADER = "X-Cairn-Event"
USER_AGENT = "cairn-outboundhook/1"
#: Cairn's documented replay window: events older (or newer) than this are refused.
#: ``[plugins.cairn] freshness_seconds`` changes it.
DEFAULT_WINDOW_SECONDS = 300

# RFC 3339 date-time only: ``fromisoformat`` alone also takes dates without a time and
# times without an offset, which would make "when" depend on the receiver's clock zone.
_RFC3339 = re.compile(
    r"(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})\Z"
)


def parse_rfc3339(value: str) -> datetime | None:
    """The instant an RFC 3339 timestamp names (``Z`` and any fraction digits), else None."""
    match = _RFC3339.match(value)
    if match is None:
        return None
    date, time, fraction, offset = match.groups()
    # datetime keeps microseconds; Cairn's clock may emit nanoseconds.
    fraction = f".{fraction[:6]}" if fraction else ""
    offset = "+00:00" if offset in ("Z", "z") else offset
    try:
        return datetime.fromisoformat(f"{date}T{time}{fraction}{offset}")
    except ValueError:
        return None


def _body_object(body: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def identity(doc: dict[str, Any] | None, body: bytes) -> Identity:
    """The body's ``kind`` and ``event_id`` (else the body's hash) from its parsed ``doc``;
    an ``event_id`` too long to keep is keyed by its own hash (``delivery_id_key``).

    Never the ``X-Cairn-*`` headers: only the body is signed.
    """
    doc = doc or {}
    kind, event_id = doc.get("kind"), doc.get("event_id")
    return Identity(
        kind=kind if isinstance(kind, str) and kind else None,
        delivery_id=delivery_id_key([event_id if isinstance(event_id, str) else None])
        or body_key(body),
    )


def _rfc3339(now: float) -> str:
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class CairnSource:
    """Verifies Cairn outbound-subscription deliveries (``artifact.created`` and friends)."""

    name = "cairn"
    trust_mode = TRUST_SIGNED

    def __init__(self, window_seconds: float = DEFAULT_WINDOW_SECONDS) -> None:
        #: How far ``created_at`` may be from the receiver's clock, either way.
        self.window_seconds = float(window_seconds)

    def verify(self, delivery: Delivery, secret: bytes | None, now: float) -> Verification:
        """Check the HMAC over the raw bytes first; only a signed body is parsed and trusted."""
        refusal = prefixed_signature_refusal(delivery, secret, SIGNATURE_HEADER)
        if refusal is not None:
            return refusal

        doc = _body_object(delivery.body)
        if doc is None:
            return Verification.refuse(
                reason=REASON_MALFORMED, detail="signed body is not a JSON object"
            )
        event_id = doc.get("event_id")
        if not isinstance(event_id, str) or not event_id:
            return Verification.refuse(
                reason=REASON_MALFORMED, detail="signed body has no event_id"
            )
        created_at = doc.get("created_at")
        if not isinstance(created_at, str) or not created_at:
            return Verification.refuse(
                reason=REASON_MALFORMED, detail="signed body has no created_at"
            )
        header_id = delivery.headers.get(EVENT_ID_HEADER)
        if header_id is not None and not constant_time_equal(event_id, header_id):
            return Verification.refuse(
                reason=REASON_ID_MISMATCH,
                detail=f"{EVENT_ID_HEADER} does not match the body's event_id",
            )
        when = parse_rfc3339(created_at)
        if when is None:
            return Verification.refuse(
                reason=REASON_MALFORMED, detail="created_at is not an RFC 3339 timestamp"
            )
        skew = now - when.timestamp()
        if abs(skew) > self.window_seconds:
            direction = "old" if skew > 0 else "in the future"
            return Verification.refuse(
                reason=REASON_STALE_TIMESTAMP,
                detail=f"created_at is {abs(skew):.0f} s {direction} (window {self.window_seconds:.0f} s)",
            )
        found = identity(doc, delivery.body)
        return Verification(ok=True, verified=True, delivery_id=found.delivery_id, kind=found.kind)

    def identify(self, headers: Headers, body: bytes) -> Identity:
        """The body's ``kind`` and ``event_id``; ``X-Cairn-Event`` is unsigned, so never used."""
        return identity(_body_object(body), body)

    def prepare(self, body: bytes, *, stamp: bool, now: float | None = None) -> bytes:
        """``body`` with ``event_id`` and ``created_at`` set, as Cairn does when it emits.

        With ``stamp`` both are replaced; otherwise only missing ones are added and a body
        that has both is returned byte for byte (so its signature is over the file as is).
        Raises ``ValueError`` when ``body`` is not a JSON object.
        """
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"cairn body is not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise ValueError("cairn body is not a JSON object")
        stamps = {
            "event_id": str(uuid.uuid4()),
            "created_at": _rfc3339(time.time() if now is None else now),
        }
        missing = {k: v for k, v in stamps.items() if stamp or not doc.get(k)}
        if not missing:
            return body
        doc.update(missing)
        # Compact, like Cairn's Go encoder; json keeps big integers exact on the way through.
        return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8")

    def sign(
        self,
        body: bytes,
        secret: bytes | None,
        kind: str | None,
        *,
        delivery_id: str | None = None,
    ) -> dict[str, str]:
        """The headers Cairn sends with ``body``; unsigned when ``secret`` is empty.

        ``X-Cairn-Event`` is ``kind`` when given, else the body's ``kind``;
        ``X-Cairn-Event-Id`` is always the body's ``event_id`` (``delivery_id`` is ignored:
        Cairn's id lives in the signed body).
        """
        doc = _body_object(body) or {}
        headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT}
        event = kind or doc.get("kind")
        if isinstance(event, str) and event:
            headers[EVENT_HEADER] = event
        event_id = doc.get("event_id")
        if isinstance(event_id, str) and event_id:
            headers[EVENT_ID_HEADER] = event_id
        if secret:
            headers[SIGNATURE_HEADER] = prefixed_signature(secret, body)
        return headers
