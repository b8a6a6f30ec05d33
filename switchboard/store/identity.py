"""SQL for humans, friendships and endpoints."""

from __future__ import annotations

from typing import Any

import psycopg

from ..errors import Conflict, NotFound, clip
from .db import Database, Row, is_uuid

_ENDPOINT_COLS = (
    "id, owner_human, name, scope_queues, verbs, webhook_queues, webhook_source_types, "
    "webhook_max, state, expires_at, created_at, revoked_at"
)

#: SQL fragment: an endpoint row aliased ``e`` is live.
LIVE_ENDPOINT = "e.state = 'active' AND (e.expires_at IS NULL OR e.expires_at > now())"


class IdentityQueries:
    db: Database

    async def create_human(self, name: str) -> Row:
        try:
            row = await self.db.fetchone(
                "INSERT INTO humans (name) VALUES (%s) RETURNING id, name, created_at", (name,)
            )
        except psycopg.errors.UniqueViolation:
            raise Conflict(f"human {clip(repr(name))} already exists") from None
        assert row is not None
        return row

    async def get_human(self, name_or_id: str) -> Row:
        if is_uuid(name_or_id):
            row = await self.db.fetchone(
                "SELECT * FROM humans WHERE id = %s OR name = %s", (name_or_id, name_or_id)
            )
        else:
            row = await self.db.fetchone("SELECT * FROM humans WHERE name = %s", (name_or_id,))
        if row is None:
            raise NotFound(f"human {clip(repr(name_or_id))} not found")
        return row

    async def set_friendship(self, from_human: str, to_human: str, state: str) -> Row:
        row = await self.db.fetchone(
            "INSERT INTO friendships (from_human, to_human, state) VALUES (%s, %s, %s) "
            "ON CONFLICT (from_human, to_human) DO UPDATE "
            "SET state = EXCLUDED.state, updated_at = now() RETURNING *",
            (from_human, to_human, state),
        )
        assert row is not None
        return row

    async def list_humans(self) -> list[Row]:
        """Every human, oldest first, with how many endpoints (live ones too) it owns."""
        return await self.db.fetchall(
            "SELECT h.id, h.name, h.created_at, count(e.id) AS endpoints,"
            f" count(e.id) FILTER (WHERE {LIVE_ENDPOINT}) AS live_endpoints"
            " FROM humans h LEFT JOIN endpoints e ON e.owner_human = h.id"
            " GROUP BY h.id ORDER BY h.created_at, h.name"
        )

    async def list_friendships(self, human_id: str | None = None) -> list[Row]:
        """Friendships by their humans' names, oldest first: all, or those ``human_id`` is in."""
        sql = (
            "SELECT a.name AS from_name, b.name AS to_name, f.state, f.created_at, f.updated_at"
            " FROM friendships f JOIN humans a ON a.id = f.from_human"
            " JOIN humans b ON b.id = f.to_human"
        )
        if human_id is None:
            return await self.db.fetchall(sql + " ORDER BY f.created_at, a.name, b.name")
        return await self.db.fetchall(
            sql + " WHERE %(h)s IN (f.from_human, f.to_human)"
            " ORDER BY f.created_at, a.name, b.name",
            {"h": human_id},
        )

    async def remove_friendship(self, from_human: str, to_human: str) -> list[Row] | None:
        """Delete the friendship and the routes it authorized, in one transaction.

        Those routes are ``from_human``'s webhooks' routes to ``to_human``'s endpoints; they
        are returned (None: there was no such friendship).
        """
        async with self.db.tx() as conn:
            cur = await conn.execute(
                "DELETE FROM friendships WHERE from_human = %s AND to_human = %s"
                " RETURNING from_human",
                (from_human, to_human),
            )
            if await cur.fetchone() is None:
                return None
            cur = await conn.execute(
                "DELETE FROM webhook_routes r USING endpoint_webhooks w, endpoints o, endpoints t"
                " WHERE w.id = r.webhook_id AND o.id = w.endpoint_id"
                " AND t.id = r.target_endpoint_id AND o.owner_human = %s AND t.owner_human = %s"
                " RETURNING r.webhook_id, r.target_endpoint_id, t.name AS target_name",
                (from_human, to_human),
            )
            routes: list[Row] = await cur.fetchall()
            return sorted(
                routes, key=lambda r: (str(r["webhook_id"]), str(r["target_endpoint_id"]))
            )

    async def create_endpoint(self, **fields: Any) -> Row:
        """Insert an endpoint, refusing (``Conflict``) a name its human's live endpoints hold.

        Checked under a lock on the human's row, so two concurrent vends of one name cannot
        both pass; the check is its own statement, whose snapshot (READ COMMITTED) sees the
        endpoint a vend that held the lock first committed. Not a unique index: databases
        from before this check may hold duplicates, which stay as they are, and a revoked or
        expired endpoint's name may be vended again (scope is fixed, so re-vending is the fix).
        """
        async with self.db.tx() as conn:
            await conn.execute(
                "SELECT 1 FROM humans WHERE id = %s FOR UPDATE", (fields["owner_human"],)
            )
            cur = await conn.execute(
                f"SELECT e.id FROM endpoints e WHERE e.owner_human = %s AND e.name = %s"
                f" AND {LIVE_ENDPOINT} ORDER BY e.created_at LIMIT 1",
                (fields["owner_human"], fields["name"]),
            )
            taken = await cur.fetchone()
            if taken is not None:
                raise Conflict(
                    f"name: this human already has a live endpoint named {fields['name']!r}"
                    f" ({taken['id']}); choose another name, or revoke that one first"
                    " (`switchboard endpoint revoke ID`)",
                    endpoint_id=str(taken["id"]),
                )
            cur = await conn.execute(
                "INSERT INTO endpoints (owner_human, name, token_hash, scope_queues, verbs, "
                "webhook_queues, webhook_source_types, webhook_max, expires_at) "
                "VALUES (%(owner_human)s, %(name)s, %(token_hash)s, %(scope_queues)s, %(verbs)s,"
                " %(webhook_queues)s, %(webhook_source_types)s, %(webhook_max)s, %(expires_at)s)"
                f" RETURNING {_ENDPOINT_COLS}",
                fields,
            )
            row = await cur.fetchone()
        assert row is not None
        return row

    async def list_endpoints(self, owner_human: str | None = None) -> list[Row]:
        sql = (
            f"SELECT e.{_ENDPOINT_COLS.replace(', ', ', e.')}, h.name AS owner_name "
            "FROM endpoints e JOIN humans h ON h.id = e.owner_human"
        )
        if owner_human is None:
            return await self.db.fetchall(sql + " ORDER BY e.created_at, e.id")
        return await self.db.fetchall(
            sql + " WHERE e.owner_human = %s ORDER BY e.created_at, e.id", (owner_human,)
        )

    async def get_endpoint(self, endpoint_id: str) -> Row:
        row = None
        if is_uuid(endpoint_id):
            row = await self.db.fetchone(
                f"SELECT {_ENDPOINT_COLS} FROM endpoints WHERE id = %s", (endpoint_id,)
            )
        if row is None:
            raise NotFound(f"endpoint {clip(endpoint_id)} not found")
        return row

    async def endpoint_by_token_hash(self, token_hash: str) -> Row | None:
        """The live endpoint holding this token, or None (revoked/expired/unknown)."""
        return await self.db.fetchone(
            f"SELECT {_ENDPOINT_COLS} FROM endpoints e WHERE token_hash = %s AND {LIVE_ENDPOINT}",
            (token_hash,),
        )

    async def revoke_endpoint(self, endpoint_id: str) -> Row:
        await self.get_endpoint(endpoint_id)
        row = await self.db.fetchone(
            "UPDATE endpoints SET state = 'revoked', revoked_at = coalesce(revoked_at, now()) "
            f"WHERE id = %s RETURNING {_ENDPOINT_COLS}",
            (endpoint_id,),
        )
        assert row is not None
        return row
