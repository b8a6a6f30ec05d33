"""One delivery end to end: verify, key, sanitize, resolve, envelope, route, persist, sinks."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from .. import metrics
from ..errors import NotFound, StoreUnavailable, SwitchboardError, error_body, http_status
from ..pgtext import clean_json, clean_text, key_text, raw_bytes
from ..registry import ProjectionRegistry
from ..routing.envelope import build_envelope
from ..routing.model import DISPOSITION_HELD, DISPOSITION_PENDING, DISPOSITION_REPEAT, Decision
from ..routing.route import config_of, grant_for, route
from ..routing.stagecall import stage_timeout_ms
from ..routing.trace import validate_trace
from ..routing.workorder import (
    ONCE_CLAIMED,
    ONCE_NO_SUBJECT,
    ONCE_REPEAT,
    once_key,
    subject_of,
    work_order,
)
from ..runtime import Runtime
from ..sanitize import joined_headers, sanitize_pairs
from ..secrets_box import hash_token
from ..sources import Delivery, Headers, body_key
from ..store import OnceClaim, StaleResolution
from . import liveload
from .observe import Observation, observe_delivery
from .refusals import record_refusal
from .sinkrun import ring_sinks
from .wake import wake_triage

log = logging.getLogger("switchboard.ingest")


@dataclass(frozen=True)
class IngestReply:
    status: int
    body: dict[str, Any]


UNKNOWN = IngestReply(404, error_body(404, "unknown webhook"))
UNVERIFIED = IngestReply(401, error_body(401, "signature verification failed"))
UNCONFIGURED = IngestReply(503, error_body(503, "webhook not configured"))


#: Longest todo title kept: a projected title and a producer's kind can be any length.
TITLE_MAX = 200


def todo_title(envelope: dict[str, Any], projections: ProjectionRegistry) -> str:
    """The first non-empty title a projection of this source offers, else source and kind;
    either cut to :data:`TITLE_MAX` characters."""
    return _title(envelope, projections)[:TITLE_MAX]


def _title(envelope: dict[str, Any], projections: ProjectionRegistry) -> str:
    for projection in projections.for_source(envelope["source"]):
        key = projection.title_key
        sub = envelope.get(projection.name)
        if key and isinstance(sub, dict) and isinstance(sub.get(key), str) and sub[key]:
            return str(sub[key])
    return f"{envelope['source']} {envelope.get('kind') or 'delivery'}"


def raw_header_block(headers: Headers, clean: list[tuple[str, str]]) -> bytes:
    """The header block in arrival order: names lower-cased, secret values redacted, other
    bytes exact; ``clean`` is ``sanitize_pairs(headers.items())``."""
    # Pair by pair, so a repeated header keeps its own line and position.
    pairs = zip(headers.items(), clean, strict=True)
    text = "\r\n".join(f"{name}: {value}" for (name, _), (_, value) in pairs)
    if text.isascii():
        return text.encode()  # what every pair's raw_bytes would give, in one call
    return b"\r\n".join(
        raw_bytes(name) + b": " + raw_bytes(value)
        for (name, _), (_, value) in zip(headers.items(), clean, strict=True)
    )


def todo_payload(envelope: dict[str, Any], event_ref: dict[str, Any]) -> dict[str, Any]:
    """What a worker claims: the delivery's facts, projections and payload (no headers)."""
    doc = dict(envelope)
    doc.pop("headers", None)
    doc.update(event_ref)
    return doc


async def ingest(
    rt: Runtime,
    token: str,
    headers: Headers,
    body: bytes,
    content_type: str | None,
    *,
    source_ip: str | None = None,
) -> IngestReply:
    """One delivery's reply; what it came to is counted and logged once (see ``observe``).

    ``source_ip`` is the peer's address, recorded with a refusal (never with an event).
    """
    started = time.monotonic()
    liveload.delivered(started)
    seen = Observation(started=started)
    try:
        try:
            reply = await _ingest(rt, token, headers, body, content_type, seen, source_ip, True)
        except StaleResolution:
            # The kept resolution went stale (a change committed since it was read) and
            # nothing was stored: the delivery again, resolved afresh, as it would have
            # been had it arrived after the change.
            reply = await _ingest(rt, token, headers, body, content_type, seen, source_ip)
        seen.status = reply.status
        return reply
    except SwitchboardError as exc:
        seen.status = 503 if isinstance(exc, StoreUnavailable) else http_status(exc)
        raise
    finally:
        observe_delivery(
            seen,
            time.monotonic(),
            per_webhook=bool(rt.config.section("metrics").get("per_webhook")),
            summary=rt.config.section("log").get("deliveries") == "summary",
        )


def _confirm(epoch: int | None) -> None:
    """An answer that stores nothing is not given from a kept resolution (``epoch`` set):
    no write checks that it is current, so the delivery is resolved afresh first."""
    if epoch is not None:
        raise StaleResolution("an answer without a write: resolved afresh")


async def _ingest(
    rt: Runtime,
    token: str,
    headers: Headers,
    body: bytes,
    content_type: str | None,
    seen: Observation,
    source_ip: str | None = None,
    kept: bool = False,
) -> IngestReply:
    epoch: int | None = None
    if kept:
        webhook, epoch = await rt.store.resolve_webhook_kept(hash_token(token))
    else:
        webhook = await rt.store.resolve_webhook(hash_token(token))
    if webhook is None:
        return UNKNOWN
    seen.webhook_id, seen.source = str(webhook["id"]), webhook["source_type"]
    source = rt.registries.sources.get(webhook["source_type"])
    if source is None:  # its plugin was disabled after the webhook was created
        _confirm(epoch)
        return UNCONFIGURED
    delivery = Delivery(headers, body, content_type, webhook.get("source_config") or {})
    sealed = webhook["signing_secret_enc"]
    secret = rt.secrets.open(sealed).encode() if sealed else None
    now = time.time()
    verdict = source.verify(delivery, secret, now)
    used = "current"
    previous = webhook.get("previous_secret_enc")
    if not verdict.ok and previous:
        # inside the last rotation's overlap window the replaced secret still verifies
        again = source.verify(delivery, rt.secrets.open(previous).encode(), now)
        if again.ok:
            verdict, used = again, "previous"
    seen.kind = verdict.kind
    if not verdict.ok:
        _confirm(epoch)  # before the refusal is recorded: it is recorded once
        # The delivery line carries the detail (and the metric its reason): not logged here.
        seen.verify_detail = verdict.detail or ""
        seen.verify_reason = metrics.verification_reason(verdict.reason, source)
        record_refusal(rt, webhook, source, delivery, verdict, source_ip)
        return UNVERIFIED
    if verdict.reply is not None and verdict.verified:
        # the producer's handshake (proving the URL): answered, nothing stored
        _confirm(epoch)
        seen.handshake = True
        return IngestReply(200, dict(verdict.reply))
    # The delivery id is an identity: escaped reversibly, so distinct ids stay distinct.
    external_id = f"{webhook['id']}:{key_text(verdict.delivery_id or body_key(body))}"
    grant = grant_for(webhook)
    if not grant.targets:
        _confirm(epoch)
        return UNCONFIGURED
    clean_headers = sanitize_pairs(headers.items())
    envelope = build_envelope(
        source=webhook["source_type"],
        kind=verdict.kind,
        webhook_id=webhook["id"],
        trust_mode=webhook["trust_mode"],
        verified=verdict.verified,
        content_type=content_type,
        headers=joined_headers(clean_headers),
        body=body,
        projections=rt.registries.projections,
    )
    config = config_of(webhook)
    routing = time.monotonic()
    decision = await route(
        rt.stages,
        webhook,
        config,
        envelope,
        grant,
        runtime=rt,
        external_id=external_id,
        stage_timeout_ms=stage_timeout_ms(rt),
        defer=True,
        confirm=None if epoch is None else lambda: rt.store.confirm_epoch(epoch),
    )
    seen.route_s = time.monotonic() - routing
    # Fault details can quote producer text (a jq error over the payload).
    trace = clean_json(decision.trace)
    if webhook.get("in_overlap") and secret is not None:
        trace["secret"] = used  # which one verified, while two are valid
    # on_fault = "hold": a delivery whose routing faulted waits, with no todo, for the
    # owner's fix and release_held_events.
    held = config.holds(trace)
    subject, once = (
        (None, None) if held else subject_and_claim(rt, webhook, decision, envelope, trace)
    )
    validate_trace(trace)
    event = {
        "source": webhook["source_type"],
        "kind": envelope["kind"],
        "external_id": external_id,
        "headers": envelope["headers"],
        "raw_headers": raw_header_block(headers, clean_headers),
        "body": body,
        "content_type": envelope["content_type"],
        "size": len(body),
        "verified": verdict.verified,
        "trust_mode": webhook["trust_mode"],
        "verify_detail": clean_text(verdict.detail) or None,
        "webhook_id": webhook["id"],
        "routing_trace": trace,
        "disposition": DISPOSITION_HELD if held else decision.disposition,
    }
    todo = todo_fields(rt, webhook, envelope, decision, subject, external_id)
    seen.kind = envelope["kind"]
    try:
        targets = [] if held else list(decision.endpoints)
        recording = time.monotonic()
        try:
            outcome = await rt.store.record_delivery(event, todo, targets, once, epoch=epoch)
        finally:  # a write that failed (503) took its time too
            seen.record_s = time.monotonic() - recording
    except NotFound:
        return UNKNOWN  # the webhook was deleted after its token resolved: nothing stored
    seen.event_id = str(outcome.event_id)
    seen.disposition, seen.trace = event["disposition"], trace
    base = {"verified": verdict.verified, "trust_mode": webhook["trust_mode"]}
    if outcome.pending:
        seen.disposition = DISPOSITION_PENDING
        if outcome.new_event:
            wake_triage()  # this process's triage worker, so it need not wait for its poll
        return IngestReply(
            202,
            {
                "todos": [],
                "created": 0,
                "disposition": DISPOSITION_PENDING,
                "event_id": outcome.event_id,
                **base,
            },
        )
    if held and not outcome.todos:
        return IngestReply(202, {"todos": [], "created": 0, "held": True, **base})
    if outcome.dropped:
        return IngestReply(202, {"todos": [], "created": 0, "dropped": True, **base})
    if outcome.repeat:
        seen.disposition = DISPOSITION_REPEAT
        if once is not None:
            seen.trace = once.repeat_trace
        return IngestReply(202, {"todos": [], "created": 0, "repeat": True, **base})
    created = [t for t in outcome.todos if t["created"]]
    seen.todos_created = len(created)
    ring_sinks(rt, {"id": outcome.event_id, **event, "envelope": envelope}, created)
    return IngestReply(
        202,
        {
            "todos": [
                {
                    "id": t["id"],
                    "endpoint_id": t["endpoint_id"],
                    "queue": t["queue"],
                    "created": t["created"],
                }
                for t in outcome.todos
            ],
            "created": len(created),
            **base,
        },
    )


def todo_fields(
    rt: Runtime,
    webhook: dict[str, Any],
    envelope: dict[str, Any],
    decision: Decision,
    subject: dict[str, Any] | None,
    external_id: str,
) -> dict[str, Any]:
    """What every todo of this decision shares: queue, title, payload and work order."""
    return {
        "queue": decision.queue,
        "title": todo_title(envelope, rt.registries.projections),
        "payload": todo_payload(
            envelope, {"webhook_id": webhook["id"], "external_id": external_id}
        ),
        "work_order": clean_json(work_order(decision, envelope, subject))
        if decision.work_order
        else None,
    }


def subject_and_claim(
    rt: Runtime,
    webhook: dict[str, Any],
    decision: Decision,
    envelope: dict[str, Any],
    trace: dict[str, Any],
) -> tuple[dict[str, Any] | None, OnceClaim | None]:
    """The subject of a ``once`` or ``work_order`` decision, and the claim ``once`` makes.

    The subject is parsed in code from the verified body, never by a tenant's expression;
    ``trace`` gains ``once`` and ``once_key`` (the repeat's trace is the claim's to store).
    """
    if decision.drop or not (decision.once or decision.work_order):
        return None, None
    subject = subject_of(
        rt.registries.subjects, envelope["source"], envelope["kind"], envelope["payload"]
    )
    if not decision.once or decision.queue is None:
        return subject, None
    if subject is None:
        trace["once"] = ONCE_NO_SUBJECT  # nothing to key: routed like any delivery
        return None, None
    key = once_key(subject["key"], decision.queue)
    trace.update(once=ONCE_CLAIMED, once_key=key)
    repeat_trace = {**trace, "once": ONCE_REPEAT}
    validate_trace(repeat_trace)
    ttl = config_of(webhook).once_ttl_s(decision.queue)
    return subject, OnceClaim(str(webhook["id"]), key, repeat_trace, ttl)
