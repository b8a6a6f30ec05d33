"""One statement for a batch of deliveries: events, todos, dedup and drops, answered per item."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb

from ..jsontext import dumps
from ..routing.model import DISPOSITION_PENDING
from .db import Row
from .outcome import DeliveryOutcome, OnceClaim, redelivery_outcome
from .rings import RUNG


@dataclass(frozen=True)
class Write:
    """One delivery waiting for its group commit (``params`` as the single-row statement's)."""

    params: dict[str, Any]
    endpoints: list[str]
    drop: bool
    once: OnceClaim | None

    @property
    def key(self) -> tuple[str, str]:
        """The dedup key (``events_dedup``): the order locks are taken in, too."""
        return self.params["source"], self.params["external_id"]

    @property
    def claims(self) -> bool:
        """A ``once`` claim to take: written by its own statements in the same transaction."""
        return self.once is not None and not self.drop


# The batch's events (sorted by their dedup key, so concurrent batches of two workers take
# the unique index's locks in one order), then the todos of the events that were inserted
# (and the pending ones' places in their deferred stage's queue), and the sinks' rings:
# one todo per (event, endpoint) row of the flattened target list, in target order. A
# conflicting event (a redelivery) inserts nothing, a live todo with the key is kept.
# The rows come as one JSON document: PostgreSQL parses it in C, where psycopg would adapt
# seventeen arrays element by element in Python. The bytes (body, header block) come beside
# it as two binary bytea arrays, the row's ``ord`` its index: copied as they are, where
# base64 in the document cost a third more bytes and an encoding and a decoding each.
_BATCH = (
    """
    WITH d AS (
        SELECT * FROM json_to_recordset(%(rows)s::json) AS d(
            ord int, id uuid, source text, kind text, external_id text, headers jsonb,
            content_type text, size int, verified bool,
            trust_mode text, verify_detail text, webhook_id uuid, routing_trace jsonb,
            disposition text, queue text, title text, payload jsonb, work_order jsonb,
            epoch bigint)
    ), now_epoch AS (
        SELECT n FROM resolve_epoch
    ), ev AS (
        INSERT INTO events (id, source, kind, external_id, headers, raw_headers, body,
                            content_type, size, verified, trust_mode, verify_detail,
                            webhook_id, routing_trace, disposition)
        SELECT id, source, kind, external_id, headers, (%(raw_headers)b::bytea[])[ord + 1],
               (%(bodies)b::bytea[])[ord + 1], content_type, size, verified, trust_mode,
               verify_detail, webhook_id, routing_trace, disposition
        FROM d
        -- a row resolved from a kept resolution is stored only while it is current
        WHERE d.epoch IS NULL OR d.epoch = (SELECT n FROM now_epoch)
        ORDER BY ord
        ON CONFLICT ON CONSTRAINT events_dedup DO NOTHING
        RETURNING id
    ), td AS (
        INSERT INTO todos (endpoint_id, queue, idempotency_key, title, payload, event_id,
                           routing_trace, work_order)
        SELECT t.endpoint_id, d.queue, d.external_id, d.title, d.payload, d.id,
               d.routing_trace, d.work_order
        FROM unnest(%(t_event)s::uuid[], %(t_endpoint)s::uuid[])
                 WITH ORDINALITY AS t(event_id, endpoint_id, ord)
        JOIN ev ON ev.id = t.event_id
        JOIN d ON d.id = t.event_id
        ORDER BY t.ord
        ON CONFLICT (endpoint_id, idempotency_key) WHERE state IN ('pending', 'claimed')
        DO NOTHING
        RETURNING id, endpoint_id, queue, event_id
    ), pe AS (
        INSERT INTO pending_events (event_id, stage, endpoint_id)
        SELECT d.id, d.routing_trace ->> 'pending', w.endpoint_id
        FROM d JOIN ev ON ev.id = d.id LEFT JOIN endpoint_webhooks w ON w.id = d.webhook_id
        WHERE d.disposition = 'pending'
    ), """
    + RUNG
    + """
    SELECT (SELECT n FROM now_epoch) AS epoch, (SELECT n FROM rung) AS rung,
           coalesce((SELECT json_agg(id) FROM ev), '[]'::json) AS events,
           coalesce((SELECT json_agg(json_build_object('id', id, 'endpoint_id', endpoint_id,
                                                       'queue', queue, 'event_id', event_id))
                     FROM td), '[]'::json) AS todos
"""
)

# What the first deliveries of these keys did: redeliveries report it (one query for all).
_FIRSTS = """
    SELECT e.source, e.external_id, e.id, e.disposition,
           coalesce((SELECT json_agg(json_build_object(
                                'id', t.id, 'endpoint_id', t.endpoint_id, 'queue', t.queue)
                            ORDER BY t.created_at, t.id)
                     FROM todos t WHERE t.event_id = e.id), '[]'::json) AS todos
    FROM unnest(%s::text[], %s::text[]) AS k(source, external_id)
    JOIN events e ON e.source = k.source AND e.external_id = k.external_id
"""

# Live todos that kept a new event's todo from being made (reported instead, not created).
_LIVE = """
    SELECT id, endpoint_id, queue, idempotency_key FROM todos
    WHERE (endpoint_id, idempotency_key) IN (SELECT * FROM unnest(%s::uuid[], %s::text[]))
      AND state IN ('pending', 'claimed')
"""

_COLUMNS = (
    "source",
    "kind",
    "external_id",
    "content_type",
    "size",
    "verified",
    "trust_mode",
    "verify_detail",
    "webhook_id",
    "disposition",
    "queue",
    "title",
    "epoch",
)
_JSON = ("headers", "routing_trace", "payload", "work_order")


def _row(ord_: int, event_id: str, params: dict[str, Any]) -> dict[str, Any]:
    """One delivery as a row of the batch's JSON document."""
    row: dict[str, Any] = {"ord": ord_, "id": event_id}
    for c in _COLUMNS:
        row[c] = params[c]
    for c in _JSON:
        value = params[c]
        row[c] = value.obj if isinstance(value, Jsonb) else value
    return row


def new_ids(n: int) -> list[str]:
    """``n`` random (version 4) UUIDs as text: ``str(uuid.uuid4())`` each, from one read of
    the system's random source (a third of the time per id: one per delivery)."""
    text = os.urandom(16 * n).hex()
    ids = []
    for i in range(0, 32 * n, 32):
        h = text[i : i + 32]
        variant = "89ab"[int(h[16], 16) & 3]
        ids.append(f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{variant}{h[17:20]}-{h[20:]}")
    return ids


def _bytes(value: bytes | bytearray | memoryview | None) -> bytes:
    """A bytea array element: never NULL (an absent header block is stored empty)."""
    return b"" if value is None else bytes(value)


async def write_many(conn: Any, writes: Sequence[Write], ring: list[str]) -> list[DeliveryOutcome]:
    """Write ``writes`` (none of them claims) with one statement; each one's outcome.
    ``ring``: the channels rung for the new todos (``rings.RUNG``).

    The same key twice resolves as a redelivery does across batches: the first is
    written, the later ones report its todos with ``created: False`` (or its drop).
    """
    leaders: dict[tuple[str, str], int] = {}
    for i in sorted(range(len(writes)), key=lambda i: writes[i].key):
        leaders.setdefault(writes[i].key, i)
    lead = [writes[i] for i in leaders.values()]
    ids = new_ids(len(lead))
    rows = [_row(n, i, w.params) for n, (i, w) in enumerate(zip(ids, lead, strict=True))]
    params: dict[str, Any] = {
        "rows": dumps(rows),
        "raw_headers": [_bytes(w.params["raw_headers"]) for w in lead],
        "bodies": [_bytes(w.params["body"]) for w in lead],
        "ring": ring,
    }
    params["t_event"] = [i for i, w in zip(ids, lead, strict=True) for _ in w.params["endpoints"]]
    params["t_endpoint"] = [e for w in lead for e in w.params["endpoints"]]
    cur = await conn.execute(_BATCH, params)
    row = await cur.fetchone()
    assert row is not None
    inserted = set(row["events"])
    made: dict[str, list[Row]] = {i: [] for i in ids}
    for t in row["todos"]:
        made[t.pop("event_id")].append({**t, "created": True})

    outcomes: dict[tuple[str, str], DeliveryOutcome] = {}
    short: list[Write] = []
    for event_id, w in zip(ids, lead, strict=True):
        if event_id not in inserted:
            kept = w.params["epoch"]
            if kept is not None and kept != row["epoch"]:
                outcomes[w.key] = DeliveryOutcome(event_id, False, False, stale_epoch=row["epoch"])
            continue
        if w.drop:
            outcomes[w.key] = DeliveryOutcome(event_id, True, True)
            continue
        if w.params["disposition"] == DISPOSITION_PENDING:
            outcomes[w.key] = DeliveryOutcome(event_id, True, False, pending=True)
            continue
        outcomes[w.key] = DeliveryOutcome(event_id, True, False, made[event_id])
        if len(made[event_id]) < len(w.endpoints):
            short.append(w)
    if short:
        await _collapse_all(conn, short, outcomes)
    again = [w.key for w in lead if w.key not in outcomes]
    if again:
        outcomes.update(await firsts(conn, again))
    answers: list[DeliveryOutcome] = []
    for i, w in enumerate(writes):
        first = outcomes[w.key]
        answers.append(first if leaders[w.key] == i else _again(first))
    return answers


def _again(first: DeliveryOutcome) -> DeliveryOutcome:
    """A later delivery of the same key in this batch: what a redelivery would report."""
    if first.stale_epoch is not None:
        return first  # the first was not stored: neither is this one, both resolve again
    todos = [{**t, "created": False} for t in first.todos if t["created"] or not first.new_event]
    return DeliveryOutcome(
        first.event_id, False, first.dropped, todos, repeat=first.repeat, pending=first.pending
    )


async def firsts(conn: Any, keys: list[tuple[str, str]]) -> dict[tuple[str, str], DeliveryOutcome]:
    """The redelivery outcome of each key, whose event is already stored."""
    cur = await conn.execute(_FIRSTS, ([k[0] for k in keys], [k[1] for k in keys]))
    found = {
        (r["source"], r["external_id"]): redelivery_outcome(r["id"], r["disposition"], r["todos"])
        for r in await cur.fetchall()
    }
    missing = [k for k in keys if k not in found]
    assert not missing, f"ON CONFLICT saw rows that are not visible: {missing[:3]}"
    return found


async def _collapse_all(
    conn: Any, short: list[Write], outcomes: dict[tuple[str, str], DeliveryOutcome]
) -> None:
    """New events some of whose todos a live todo with the same key stood for."""
    pairs = [
        (e, w.params["external_id"])
        for w in short
        for e in w.endpoints
        if e not in {t["endpoint_id"] for t in outcomes[w.key].todos}
    ]
    cur = await conn.execute(_LIVE, ([p[0] for p in pairs], [p[1] for p in pairs]))
    live: dict[tuple[str, str], Row] = {}
    for r in await cur.fetchall():
        key = r.pop("idempotency_key")
        live[(r["endpoint_id"], key)] = {**r, "created": False}
    for w in short:
        outcome = outcomes[w.key]
        by_endpoint = {t["endpoint_id"]: t for t in outcome.todos}
        for e in w.endpoints:
            if e not in by_endpoint and (e, w.params["external_id"]) in live:
                by_endpoint[e] = live[(e, w.params["external_id"])]
        outcome.todos = [by_endpoint[e] for e in w.endpoints if e in by_endpoint]
