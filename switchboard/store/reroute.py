"""SQL for re-routing stored deliveries: what each already has, and the todos it gains."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg.types.json import Jsonb

from .db import Database, Row


class RerouteQueries:
    db: Database

    async def reroute_state(self, event_ids: Sequence[str]) -> dict[str, Row]:
        """Per event: its stored trace, disposition, dedup key and the endpoints that have a
        todo from it (in any state: a re-route never makes a second one)."""
        rows = await self.db.fetchall(
            "SELECT e.id::text AS id, e.routing_trace, e.disposition, e.external_id,"
            " coalesce((SELECT array_agg(t.endpoint_id::text) FROM todos t"
            "           WHERE t.event_id = e.id), '{}') AS endpoints"
            " FROM events e WHERE e.id = ANY(%s::uuid[])",
            (list(event_ids),),
        )
        return {str(r["id"]): r for r in rows}

    async def apply_reroute(
        self,
        event_id: str,
        *,
        todos: Sequence[dict[str, Any]],
        entry: dict[str, Any],
        version: int,
        disposition: str | None,
    ) -> list[Row]:
        """In one transaction: the event's new todos (never where one from it exists, in any
        state), and the ``reroutes`` entry of ``version`` on its trace (once per version);
        ``disposition``, when given, is the event's from now on (a released or re-routed drop)."""
        created: list[Row] = []
        async with self.db.tx() as conn:
            cur = await conn.execute(
                "UPDATE events SET routing_trace = jsonb_set(routing_trace, '{reroutes}',"
                " coalesce(routing_trace -> 'reroutes', '[]'::jsonb) || %s::jsonb),"
                " disposition = coalesce(%s, disposition)"
                " WHERE id = %s AND NOT coalesce(routing_trace -> 'reroutes', '[]'::jsonb)"
                " @> %s::jsonb RETURNING id",
                (Jsonb([entry]), disposition, event_id, Jsonb([{"version": version}])),
            )
            if await cur.fetchone() is None:
                return []  # re-routed under this version before: nothing again
            for todo in todos:
                cur = await conn.execute(
                    "INSERT INTO todos (endpoint_id, queue, idempotency_key, title, payload,"
                    " event_id, routing_trace)"
                    " SELECT %(endpoint)s, %(queue)s, %(key)s, %(title)s, %(payload)s,"
                    " %(event)s, %(trace)s WHERE NOT EXISTS (SELECT 1 FROM todos"
                    " WHERE event_id = %(event)s AND endpoint_id = %(endpoint)s)"
                    " ON CONFLICT (endpoint_id, idempotency_key)"
                    " WHERE state IN ('pending', 'claimed') DO NOTHING"
                    " RETURNING id::text, endpoint_id::text, queue",
                    {
                        "endpoint": todo["endpoint_id"],
                        "queue": todo["queue"],
                        "key": todo["idempotency_key"],
                        "title": todo["title"],
                        "payload": Jsonb(todo["payload"]),
                        "event": event_id,
                        "trace": Jsonb(todo["routing_trace"]),
                    },
                )
                row = await cur.fetchone()
                if row is not None:
                    created.append(row)
        return created


__all__ = ["RerouteQueries"]
