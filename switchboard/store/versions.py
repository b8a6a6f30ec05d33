"""SQL for a webhook's routing versions (every save) and the diffs that may gate a save."""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb

from .db import Database, Row

_VERSION_COLS = "webhook_id, version, config, config_hash, author, note, created_at"


class VersionQueries:
    db: Database

    async def routing_version(self, conn: Any, webhook_id: str) -> int:
        """The webhook's current version number (0: never saved since versions began)."""
        cur = await conn.execute(
            "SELECT coalesce(max(version), 0) AS v FROM routing_versions WHERE webhook_id = %s",
            (webhook_id,),
        )
        row = await cur.fetchone()
        return int(row["v"]) if row is not None else 0

    async def add_routing_version(
        self,
        conn: Any,
        webhook_id: str,
        *,
        version: int,
        config: dict[str, Any],
        config_hash: str,
        author: str,
        note: str | None,
    ) -> Row:
        """Record ``version`` (run under the webhook's row lock, in the save's transaction)."""
        cur = await conn.execute(
            "INSERT INTO routing_versions (webhook_id, version, config, config_hash, author, note)"
            f" VALUES (%s, %s, %s, %s, %s, %s) RETURNING {_VERSION_COLS}",
            (webhook_id, version, Jsonb(config), config_hash, author, note),
        )
        row: Row | None = await cur.fetchone()
        assert row is not None
        return row

    async def list_routing_versions(
        self, webhook_id: str, *, limit: int, before: int | None = None
    ) -> list[Row]:
        """Newest first, ``limit`` at most, below version ``before`` when given; each row
        with ``current_version``, the newest of all, read in the same snapshot."""
        return await self.db.fetchall(
            f"SELECT {_VERSION_COLS}, (SELECT max(c.version) FROM routing_versions c"
            " WHERE c.webhook_id = %s) AS current_version"
            " FROM routing_versions WHERE webhook_id = %s"
            " AND (%s::integer IS NULL OR version < %s::integer)"
            " ORDER BY version DESC LIMIT %s",
            (webhook_id, webhook_id, before, before, limit),
        )

    async def get_routing_version(self, webhook_id: str, version: int) -> Row | None:
        return await self.db.fetchone(
            f"SELECT {_VERSION_COLS} FROM routing_versions WHERE webhook_id = %s AND version = %s",
            (webhook_id, version),
        )

    async def record_diff(self, webhook_id: str, candidate_hash: str, evaluated: int) -> None:
        """Remember a diff of ``candidate_hash`` (the newest one counts)."""
        await self.db.fetchone(
            "INSERT INTO routing_diffs (webhook_id, candidate_hash, evaluated)"
            " VALUES (%s, %s, %s) ON CONFLICT (webhook_id, candidate_hash) DO UPDATE"
            " SET evaluated = EXCLUDED.evaluated, diffed_at = EXCLUDED.diffed_at"
            " RETURNING webhook_id",
            (webhook_id, candidate_hash, evaluated),
        )

    async def last_diff(self, webhook_id: str, candidate_hash: str) -> Row | None:
        """The recorded diff of ``candidate_hash``: how many events, and when."""
        row: Row | None = await self.db.fetchone(
            "SELECT evaluated, diffed_at, clock_timestamp() AS now FROM routing_diffs"
            " WHERE webhook_id = %s AND candidate_hash = %s",
            (webhook_id, candidate_hash),
        )
        return row


__all__ = ["VersionQueries"]
