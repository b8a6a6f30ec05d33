"""Envelopes for dry runs: rebuilt from a stored event, or from a sample body and headers."""

from __future__ import annotations

import json
from typing import Any

from ..pgtext import raw_bytes
from ..registry import ProjectionRegistry, SourceRegistry
from ..sanitize import sanitize_headers
from ..sources import TRUST_SIGNED, Headers, identify
from .envelope import build_envelope


def stored_envelope(
    projections: ProjectionRegistry, event: dict[str, Any], webhook_id: str
) -> dict[str, Any]:
    """The envelope a stored delivery saw: its sanitized headers and raw body, as persisted.

    An :class:`~.envelope.Envelope`: it also holds the payload's JSON text when proven to
    read as the payload (so a dry run's sandbox is sent the body, not the value written out).
    """
    return build_envelope(
        source=event["source"],
        kind=event["kind"],
        webhook_id=webhook_id,
        trust_mode=event["trust_mode"],
        verified=bool(event["verified"]),
        content_type=event["content_type"],
        headers=dict(event["headers"] or {}),
        body=bytes(event["body"]),
        projections=projections,
        keep_text=True,
    )


def raw_body(payload: Any) -> bytes:
    """A sample payload as raw bytes: a string is the body itself, anything else is JSON."""
    if isinstance(payload, bytes):
        return payload
    if isinstance(payload, str):
        # A sample string can hold what no UTF-8 body can (a lone surrogate from a JSON
        # escape): keep its bytes where they exist, escape the rest, never raise.
        return raw_bytes(payload)
    return json.dumps(payload).encode()


def sample_envelope(
    projections: ProjectionRegistry,
    *,
    sources: SourceRegistry,
    source: str,
    trust_mode: str,
    webhook_id: str,
    body: bytes,
    headers: dict[str, str] | None = None,
    verified: bool | None = None,
) -> dict[str, Any]:
    """The envelope the receiver would build for ``body`` and the producer's ``headers``.

    The kind is the one ``sources``' ``source`` identifies, as its ``verify()`` would
    report it live (None for a source without ``identify`` or no longer registered).
    ``verified`` defaults to what a correctly signed delivery would show.
    """
    raw_headers = Headers(dict(headers or {}))
    found = identify(sources.get(source), raw_headers, body)
    return build_envelope(
        source=source,
        kind=found.kind,
        webhook_id=webhook_id,
        trust_mode=trust_mode,
        verified=(trust_mode == TRUST_SIGNED) if verified is None else verified,
        content_type=raw_headers.get("content-type") or "application/json",
        headers=sanitize_headers(raw_headers),
        body=body,
        projections=projections,
    )
