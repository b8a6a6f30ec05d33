"""SQL for at-most-once claims the owner releases (each release recorded, with who)."""

from __future__ import annotations

from .db import Database, Row

# One statement: the claims go and their releases are recorded, or neither.
_RELEASE = """
    WITH gone AS (
        DELETE FROM routing_once
        WHERE webhook_id = ANY(%(webhooks)s::uuid[]) AND once_key = %(key)s
        RETURNING webhook_id, once_key, event_id, created_at, expires_at
    ), logged AS (
        INSERT INTO routing_once_releases
            (webhook_id, once_key, queue, subject, event_id, released_by)
        SELECT webhook_id, once_key, %(queue)s, %(subject)s, event_id, %(who)s FROM gone
    )
    SELECT webhook_id, event_id, created_at AS claimed_at,
           expires_at IS NOT NULL AND expires_at <= now() AS expired
    FROM gone ORDER BY webhook_id
"""


class OnceQueries:
    db: Database

    async def release_once(
        self, webhook_ids: list[str], key: str, queue: str, subject: str, who: str
    ) -> list[Row]:
        """Delete ``key``'s claim on each of ``webhook_ids`` and record who released it."""
        return await self.db.fetchall(
            _RELEASE,
            {"webhooks": webhook_ids, "key": key, "queue": queue, "subject": subject, "who": who},
        )

    async def once_claim(self, webhook_id: str, key: str) -> Row | None:
        """The live claim of ``key`` on the webhook (an expired one is no claim)."""
        return await self.db.fetchone(
            "SELECT event_id, created_at AS claimed_at, expires_at FROM routing_once"
            " WHERE webhook_id = %s AND once_key = %s"
            " AND (expires_at IS NULL OR expires_at > now())",
            (webhook_id, key),
        )
