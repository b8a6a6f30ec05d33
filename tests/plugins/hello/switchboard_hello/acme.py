"""The ``acme`` source, its ``.acme`` projection and a JSON-lines sink (the README's example).

Written from :mod:`switchboard.plugin` alone, as any third party writes a plugin.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

from switchboard.plugin import (
    REASON_MISCONFIGURED,
    REASON_MISMATCH,
    TRUST_SIGNED,
    Delivery,
    Headers,
    Identity,
    Projection,
    Runtime,
    SinkEvent,
    SinkTodo,
    Verification,
    body_key,
    constant_time_equal,
    hmac_sha256_hex,
)


def event_type(body: bytes) -> str | None:
    """The JSON body's ``type`` string, or None; never raises."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return None
    kind = doc.get("type") if isinstance(doc, dict) else None
    return kind if isinstance(kind, str) else None


class AcmeSource:
    """Acme signs every body: ``X-Acme-Signature`` is its hex HMAC-SHA256."""

    name = "acme"
    trust_mode = TRUST_SIGNED

    def identify(self, headers: Headers, body: bytes) -> Identity:
        """Kind: the body's ``type``. Delivery id: ``X-Acme-Id``, else the body's hash."""
        return Identity(
            kind=event_type(body), delivery_id=headers.get("X-Acme-Id") or body_key(body)
        )

    def verify(self, delivery: Delivery, secret: bytes | None, now: float) -> Verification:
        """Check the signature in constant time; report what ``identify`` reports."""
        if not secret:
            return Verification.refuse(reason=REASON_MISCONFIGURED, detail="no signing secret")
        expected = hmac_sha256_hex(secret, delivery.body)
        if not constant_time_equal(expected, delivery.headers.get("X-Acme-Signature")):
            return Verification.refuse(
                reason=REASON_MISMATCH, detail="X-Acme-Signature does not match"
            )
        found = self.identify(delivery.headers, delivery.body)
        return Verification(ok=True, verified=True, delivery_id=found.delivery_id, kind=found.kind)

    def sign(self, body: bytes, secret: bytes | None, kind: str | None) -> dict[str, str]:
        """The headers Acme sends (the kind travels in the body, so ``kind`` is ignored)."""
        headers = {"Content-Type": "application/json", "X-Acme-Id": str(uuid.uuid4())}
        if secret:
            headers["X-Acme-Signature"] = hmac_sha256_hex(secret, body)
        return headers


ACME_KEYS = ("id", "type", "title", "priority", "labels")


def build_acme(source: str, kind: str | None, payload: Any) -> dict[str, Any] | None:
    """``.acme``: the ticket fields rules need; strings only, so rules never fault on types."""
    if not isinstance(payload, dict):
        return None
    out: dict[str, Any] = {}
    for key in ("id", "type", "title", "priority"):
        value = payload.get(key)
        out[key] = value if isinstance(value, str) else None
    labels = payload.get("labels")
    out["labels"] = [x for x in labels if isinstance(x, str)] if isinstance(labels, list) else []
    return out


ACME_PROJECTION = Projection(
    name="acme", sources=("acme",), keys=ACME_KEYS, build=build_acme, title_key="title"
)


class JsonLinesSink:
    """Appends one JSON line per delivered event (with its new todos) to ``path``."""

    name = "hello-jsonl"

    def __init__(self, path: str) -> None:
        self.path = Path(path)

    async def deliver(self, runtime: Runtime, event: SinkEvent, todos: list[SinkTodo]) -> None:
        line = {
            "id": event["id"],
            "kind": event["kind"],
            "webhook_id": event["webhook_id"],
            "disposition": event["disposition"],
            "todos": [todo["id"] for todo in todos],
            "keys": sorted(event),
            # the envelope the stages saw, with this plugin's own projection in it
            "title": (event.get("envelope") or {}).get("acme", {}).get("title"),
        }
        await asyncio.to_thread(self._append, json.dumps(line) + "\n")

    def _append(self, text: str) -> None:
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(text)
