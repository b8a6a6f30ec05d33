"""SQL for re-routing stored deliveries: what each already has, and the todos it gains."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from ..routing.workorder import ONCE_REPEAT
from .db import Database, Row
from .outcome import ONCE_CLAIM, OnceClaim

#: What a scrape reads (``switchboard_held_events``): by ``idx_events_held`` (migration
#: 0090), bounded like the todo counts.
HELD_COUNT = "SELECT count(*) AS n FROM events WHERE disposition = 'held'"
HELD_COUNT_TIMEOUT_MS = 2000


def held_count_sync(dsn: str, timeout_s: float = 2.0) -> int:
    """:meth:`RerouteQueries.held_count` on a connection of its own (the listener)."""
    with psycopg.connect(dsn, autocommit=True, connect_timeout=max(1, round(timeout_s))) as conn:
        conn.execute(f"SET statement_timeout = {HELD_COUNT_TIMEOUT_MS}")
        row = conn.execute(HELD_COUNT).fetchone()
        return int(row[0]) if row else 0


class RerouteQueries:
    db: Database

    async def held_count(self) -> int:
        """Deliveries stored ``held`` (``on_fault = "hold"``), every webhook's."""
        async with self.db.conn() as conn:
            async with conn.transaction():
                await conn.execute(f"SET LOCAL statement_timeout = {HELD_COUNT_TIMEOUT_MS}")
                cur = await conn.execute(HELD_COUNT)
                row = await cur.fetchone()
                return int(row["n"]) if row else 0

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
        once: OnceClaim | None = None,
        repeat_disposition: str | None = None,
    ) -> tuple[list[Row], str | None]:
        """In one transaction: the event's new todos (never where one from it exists, in any
        state), and the ``reroutes`` entry of ``version`` on its trace (once per version);
        ``disposition``, when given, is the event's from now on (a released or re-routed drop).

        ``once``: the claim is taken first, as a live delivery takes it; when another event
        holds it the event gains no todo (its entry says ``once: "repeat"`` and who holds
        it) and ``repeat_disposition`` is its disposition. Answers the todos created and the
        holder's event id when it was a repeat.
        """
        created: list[Row] = []
        async with self.db.tx() as conn:
            cur = await conn.execute(
                "SELECT 1 AS hit FROM events WHERE id = %s AND NOT"
                " coalesce(routing_trace -> 'reroutes', '[]'::jsonb) @> %s::jsonb FOR UPDATE",
                (event_id, Jsonb([{"version": version}])),
            )
            if await cur.fetchone() is None:
                return [], None  # re-routed under this version before: nothing again
            holder: str | None = None
            if once is not None:
                cur = await conn.execute(ONCE_CLAIM, once.params(event_id))
                held = await cur.fetchone()
                assert held is not None
                if str(held["event_id"]) != event_id:
                    holder = str(held["event_id"])
                    entry = {**entry, "once": ONCE_REPEAT, "held_by": holder}
                    todos, disposition = (), repeat_disposition
            await conn.execute(
                "UPDATE events SET routing_trace = jsonb_set(routing_trace, '{reroutes}',"
                " coalesce(routing_trace -> 'reroutes', '[]'::jsonb) || %s::jsonb),"
                " disposition = coalesce(%s, disposition) WHERE id = %s",
                (Jsonb([entry]), disposition, event_id),
            )
            for todo in todos:
                cur = await conn.execute(
                    "INSERT INTO todos (endpoint_id, queue, idempotency_key, title, payload,"
                    " event_id, routing_trace, work_order)"
                    " SELECT %(endpoint)s, %(queue)s, %(key)s, %(title)s, %(payload)s,"
                    " %(event)s, %(trace)s, %(order)s WHERE NOT EXISTS (SELECT 1 FROM todos"
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
                        "order": None
                        if todo.get("work_order") is None
                        else Jsonb(todo["work_order"]),
                    },
                )
                row = await cur.fetchone()
                if row is not None:
                    created.append(row)
        return created, holder


__all__ = ["HELD_COUNT", "RerouteQueries", "held_count_sync"]
