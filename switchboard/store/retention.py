"""Event retention: the plan of what a cutoff would delete, and deletes in bounded batches."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from .db import Database, Row

#: The advisory lock a prune batch holds for its transaction: one batch at a time across
#: every server on the database (whoever holds it, the others' batches wait or skip).
PRUNE_LOCK = 0x5B0A_4E37

#: Which events a cutoff applies to. ``live``: one webhook's (``webhook_id``); ``detached``:
#: every event whose webhook was deleted (or that never had one); ``deleted``: one deleted
#: webhook's (``webhook_id`` is the deleted webhook's id).
SCOPES = ("live", "detached", "deleted")

# Each scope reads an index: idx_events_webhook (webhook_id, received_at DESC) for live and
# detached (IS NULL is indexable), idx_events_deleted_webhook for one deleted webhook.
_WHERE = {
    "live": "webhook_id = %(webhook_id)s",
    "detached": "webhook_id IS NULL",
    "deleted": "webhook_id IS NULL AND deleted_webhook_id = %(webhook_id)s",
}

# A pending event waits for its deferred stage's decision: pruning it would drop work.
_EXPIRED = "received_at < %(before)s AND disposition <> 'pending'"


@dataclass(frozen=True)
class Cutoff:
    """Events of ``scope`` (and ``webhook_id``) received before ``before`` are expired."""

    scope: str
    before: dt.datetime
    webhook_id: str | None = None

    def params(self, **more: Any) -> dict[str, Any]:
        return {"webhook_id": self.webhook_id, "before": self.before, **more}


class RetentionQueries:
    db: Database

    async def retention_overrides(self) -> dict[str, int]:
        """Each live webhook whose routing config sets ``events_days``: its days."""
        rows = await self.db.fetchall(
            "SELECT id, (routing->>'events_days')::int AS days FROM endpoint_webhooks"
            " WHERE coalesce((routing->>'events_days')::int, 0) > 0"
        )
        return {row["id"]: int(row["days"]) for row in rows}

    async def live_webhook_ids(self) -> list[str]:
        rows = await self.db.fetchall("SELECT id FROM endpoint_webhooks ORDER BY id")
        return [row["id"] for row in rows]

    async def deleted_webhook_exists(self, webhook_id: str) -> bool:
        row = await self.db.fetchone(
            "SELECT 1 AS hit FROM deleted_webhooks WHERE id = %s", (webhook_id,)
        )
        return row is not None

    async def expired_summary(self, cutoff: Cutoff) -> Row:
        """How many events ``cutoff`` expires, and the oldest's and newest's times."""
        row = await self.db.fetchone(
            "SELECT count(*) AS events, min(received_at) AS oldest, max(received_at) AS newest"
            f" FROM events WHERE {_WHERE[cutoff.scope]} AND {_EXPIRED}",
            cutoff.params(),
        )
        assert row is not None
        return row

    async def prune_batch(self, cutoff: Cutoff, limit: int, *, wait: bool) -> int | None:
        """Delete up to ``limit`` of the events ``cutoff`` expires, oldest first, in one short
        transaction; how many went, or None when another server holds the prune lock and
        ``wait`` is false (the background job then leaves the run to it).

        Rows another transaction has locked (a deferred stage writing its decision) are
        skipped, never waited for. Deleting an event nulls its todos' ``event_id`` (their
        snapshot stays) and never touches ``routing_once`` (no foreign key: a claim outlives
        the event that took it).
        """
        lock = "pg_advisory_xact_lock" if wait else "pg_try_advisory_xact_lock"
        async with self.db.tx() as conn:
            cur = await conn.execute(f"SELECT {lock}(%s)::text AS got", (PRUNE_LOCK,))
            got = await cur.fetchone()
            if not wait and not (got and got["got"] == "true"):
                return None
            cur = await conn.execute(
                f"""
                WITH doomed AS (
                    SELECT id FROM events
                    WHERE {_WHERE[cutoff.scope]} AND {_EXPIRED}
                    ORDER BY received_at
                    LIMIT %(limit)s
                    FOR UPDATE SKIP LOCKED
                )
                DELETE FROM events e USING doomed WHERE e.id = doomed.id
                """,
                cutoff.params(limit=limit),
            )
            return cur.rowcount
