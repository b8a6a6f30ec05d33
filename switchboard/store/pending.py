"""Pending events: claimed by the triage worker under a lease, decided exactly once."""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb

from ..routing.model import DISPOSITION_DROPPED, DISPOSITION_REPEAT
from .db import Database, Row
from .migrate import read_sync
from .outcome import ONCE_CLAIM, DeliveryOutcome, OnceClaim
from .rings import RUNG, Rings

# Up to ``n`` free events of ``stage``, oldest first in turns: every endpoint's oldest,
# then every endpoint's second oldest ... (one endpoint's backlog never starves another's).
# SKIP LOCKED: two workers claiming at once take different rows, and neither waits. A row
# is free when it was never claimed, was given back, or its lease ran out (its worker
# died): the claim counts an attempt either way.
_CLAIM = """
    WITH free AS (
        SELECT DISTINCT endpoint_id FROM pending_events
        WHERE stage = %(stage)s AND lease_until < now()
    ), cand AS (
        SELECT c.event_id, c.received_at,
               row_number() OVER (PARTITION BY c.endpoint_id
                                  ORDER BY c.received_at, c.event_id) AS turn
        FROM free f CROSS JOIN LATERAL (
            SELECT p.event_id, p.endpoint_id, p.received_at FROM pending_events p
            WHERE p.stage = %(stage)s AND p.endpoint_id IS NOT DISTINCT FROM f.endpoint_id
              AND p.lease_until < now()
            ORDER BY p.received_at, p.event_id
            LIMIT %(n)s
            FOR UPDATE SKIP LOCKED
        ) c
        ORDER BY turn, c.received_at, c.event_id
        LIMIT %(n)s
    )
    UPDATE pending_events p
    SET attempts = p.attempts + 1, lease_owner = %(owner)s,
        lease_until = clock_timestamp() + make_interval(secs => %(lease)s)
    FROM cand, events e
    WHERE p.event_id = cand.event_id AND e.id = p.event_id
    RETURNING p.event_id, p.stage, p.attempts, p.received_at,
              greatest(0, extract(epoch FROM clock_timestamp() - e.received_at)) AS waited_s,
              e.source, e.kind, e.external_id, e.headers, e.raw_headers, e.body,
              e.content_type, e.size, e.verified, e.trust_mode, e.verify_detail,
              e.webhook_id, e.routing_trace
"""

# The decision's todos, and the sinks' rings for them (``rings``).
_TODOS = (
    """
    WITH td AS (
        INSERT INTO todos (endpoint_id, queue, idempotency_key, title, payload, event_id,
                           routing_trace, work_order)
        SELECT t.endpoint_id, %(queue)s, %(external_id)s, %(title)s, %(payload)s,
               %(event_id)s, %(routing_trace)s, %(work_order)s
        FROM unnest(%(endpoints)s::uuid[]) WITH ORDINALITY AS t(endpoint_id, ord)
        ORDER BY t.ord
        ON CONFLICT (endpoint_id, idempotency_key) WHERE state IN ('pending', 'claimed')
        DO NOTHING
        RETURNING id, endpoint_id, queue
    ), """
    + RUNG
    + """
    SELECT td.* FROM td, rung
"""
)

#: What a scrape reads (``switchboard_pending_events{stage}``), bounded like the todo counts.
PENDING_COUNTS = "SELECT stage, count(*) AS n FROM pending_events GROUP BY stage"
PENDING_COUNTS_TIMEOUT_MS = 2000


def pending_counts_sync(dsn: str, timeout_s: float = 2.0) -> dict[str, int]:
    """:meth:`PendingQueries.pending_counts` on a connection of its own (see
    :func:`~switchboard.store.migrate.read_sync`)."""
    return {str(r["stage"]): int(r["n"]) for r in read_sync(dsn, PENDING_COUNTS, timeout_s)}


class PendingQueries:
    db: Database
    rings: Rings

    async def claim_pending(self, stage: str, owner: str, n: int, lease_s: float) -> list[Row]:
        """Lease up to ``n`` free pending events of ``stage`` to ``owner`` for ``lease_s``:
        each with its stored delivery, ``attempts`` (this claim included) and
        ``waited_s`` (since it was received)."""
        rows = await self.db.fetchall(
            _CLAIM, {"stage": stage, "owner": owner, "n": n, "lease": float(lease_s)}
        )
        rows.sort(key=lambda r: r["received_at"])
        return rows

    async def release_pending(self, owner: str, event_ids: list[str]) -> int:
        """Give leases back unspent (a stopping worker): free at once, the attempt uncounted."""
        if not event_ids:
            return 0
        rows = await self.db.fetchall(
            "UPDATE pending_events SET lease_owner = NULL, lease_until = '-infinity',"
            " attempts = greatest(attempts - 1, 0)"
            " WHERE lease_owner = %s AND event_id = ANY(%s::uuid[]) RETURNING event_id",
            (owner, event_ids),
        )
        return len(rows)

    async def postpone_pending(self, event_id: str, owner: str, after_s: float) -> bool:
        """Give a lease back to be claimed again after ``after_s`` (the attempt uncounted)."""
        row = await self.db.fetchone(
            "UPDATE pending_events SET lease_owner = NULL,"
            " lease_until = clock_timestamp() + make_interval(secs => %s),"
            " attempts = greatest(attempts - 1, 0)"
            " WHERE event_id = %s AND lease_owner = %s RETURNING event_id",
            (float(after_s), event_id, owner),
        )
        return row is not None

    async def pending_counts(self, endpoint_id: str | None = None) -> dict[str, int]:
        """Pending events per deferred stage (of one owner endpoint's webhooks, if given)."""
        if endpoint_id is not None:
            rows = await self.db.fetchall(
                "SELECT stage, count(*) AS n FROM pending_events WHERE endpoint_id = %s"
                " GROUP BY stage",
                (endpoint_id,),
            )
            return {r["stage"]: int(r["n"]) for r in rows}
        async with self.db.conn() as conn:
            async with conn.transaction():
                await conn.execute(f"SET LOCAL statement_timeout = {PENDING_COUNTS_TIMEOUT_MS}")
                cur = await conn.execute(PENDING_COUNTS)
                return {r["stage"]: int(r["n"]) for r in await cur.fetchall()}

    async def finish_pending(
        self,
        event_id: str,
        owner: str,
        trace: dict[str, Any],
        disposition: str,
        todo: dict[str, Any],
        endpoints: list[str],
        once: OnceClaim | None = None,
    ) -> DeliveryOutcome | None:
        """Write a pending event's decision in one transaction: its trace and disposition,
        its todos (a live todo with the key is reported instead, as at the receiver) and
        its ``once`` claim. None, writing nothing, when ``owner`` no longer holds the lease
        (it ran out and another worker took the event over: that one decides)."""
        async with self.db.tx() as conn:
            cur = await conn.execute(
                "DELETE FROM pending_events WHERE event_id = %s AND lease_owner = %s"
                " RETURNING event_id",
                (event_id, owner),
            )
            if await cur.fetchone() is None:
                return None
            if once is not None and disposition != DISPOSITION_DROPPED:
                cur = await conn.execute(ONCE_CLAIM, once.params(event_id))
                holder = await cur.fetchone()
                assert holder is not None
                if str(holder["event_id"]) != event_id:
                    trace, disposition, endpoints = once.repeat_trace, DISPOSITION_REPEAT, []
            await conn.execute(
                "UPDATE events SET routing_trace = %s, disposition = %s WHERE id = %s",
                (Jsonb(trace), disposition, event_id),
            )
            if disposition == DISPOSITION_DROPPED:
                return DeliveryOutcome(event_id, True, True)
            if disposition == DISPOSITION_REPEAT:
                return DeliveryOutcome(event_id, True, False, repeat=True)
            cur = await conn.execute(
                _TODOS,
                {
                    "queue": todo.get("queue"),
                    "external_id": todo["external_id"],
                    "title": todo.get("title", ""),
                    "payload": Jsonb(todo.get("payload") or {}),
                    "event_id": event_id,
                    "routing_trace": Jsonb(trace),
                    "work_order": Jsonb(todo["work_order"]) if todo.get("work_order") else None,
                    "endpoints": endpoints,
                    "ring": self.rings.channels,
                },
            )
            by_endpoint = {t["endpoint_id"]: {**t, "created": True} for t in await cur.fetchall()}
            if len(by_endpoint) < len(endpoints):
                cur = await conn.execute(
                    "SELECT id, endpoint_id, queue FROM todos WHERE endpoint_id = ANY(%s::uuid[])"
                    " AND idempotency_key = %s AND state IN ('pending', 'claimed')",
                    ([e for e in endpoints if e not in by_endpoint], todo["external_id"]),
                )
                by_endpoint |= {
                    r["endpoint_id"]: {**r, "created": False} for r in await cur.fetchall()
                }
            made = [by_endpoint[e] for e in endpoints if e in by_endpoint]  # in target order
        # Committed: the sinks it rang (``at_commit``) hear of it now.
        self.rings.committed(t for t in made if t["created"])
        return DeliveryOutcome(event_id, True, False, made)
