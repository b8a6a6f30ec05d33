"""SQL for the delivery transaction (event + todos) and for reading events back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from psycopg.types.json import Jsonb

from .db import Database, Row, is_uuid


@dataclass
class DeliveryOutcome:
    """What one delivery transaction did."""

    event_id: str
    new_event: bool
    dropped: bool
    todos: list[Row] = field(default_factory=list)  # id, endpoint_id, queue, created


_INSERT_EVENT = """
    INSERT INTO events (source, kind, external_id, headers, body, content_type, size,
                        verified, trust_mode, verify_detail, webhook_id, routing_trace)
    VALUES (%(source)s, %(kind)s, %(external_id)s, %(headers)s, %(body)s, %(content_type)s,
            %(size)s, %(verified)s, %(trust_mode)s, %(verify_detail)s, %(webhook_id)s,
            %(routing_trace)s)
    ON CONFLICT ON CONSTRAINT events_dedup DO NOTHING
    RETURNING id
"""

_INSERT_TODO = """
    INSERT INTO todos (endpoint_id, queue, idempotency_key, title, payload, event_id,
                       routing_trace, work_order)
    VALUES (%(endpoint_id)s, %(queue)s, %(idempotency_key)s, %(title)s, %(payload)s,
            %(event_id)s, %(routing_trace)s, %(work_order)s)
    ON CONFLICT (endpoint_id, idempotency_key) WHERE state IN ('pending', 'claimed')
    DO NOTHING
    RETURNING id, endpoint_id, queue
"""


class EventQueries:
    db: Database

    async def record_delivery(
        self,
        event: dict[str, Any],
        todos: list[dict[str, Any]],
        *,
        drop: bool,
    ) -> DeliveryOutcome:
        """Write the event and its todos in one transaction; redeliveries collapse.

        A redelivery (same source and external id) writes nothing: it reports the first
        delivery's todos, and stays dropped if the first delivery was dropped.
        """
        params = dict(event)
        params["headers"] = Jsonb(event["headers"])
        params["routing_trace"] = Jsonb(event["routing_trace"])
        async with self.db.tx() as conn:
            cur = await conn.execute(_INSERT_EVENT, params)
            row = await cur.fetchone()
            if row is None:
                return await self._redelivery(conn, event["source"], event["external_id"])
            event_id = row["id"]
            if drop:
                return DeliveryOutcome(event_id, True, True)
            out = []
            for todo in todos:
                tparams = dict(todo, event_id=event_id)
                tparams["payload"] = Jsonb(todo["payload"])
                tparams["routing_trace"] = Jsonb(todo["routing_trace"])
                tparams["work_order"] = Jsonb(todo["work_order"]) if todo.get("work_order") else None
                cur = await conn.execute(_INSERT_TODO, tparams)
                made = await cur.fetchone()
                if made is not None:
                    out.append({**made, "created": True})
                    continue
                # A live todo with this key already exists for the endpoint: collapse.
                cur = await conn.execute(
                    "SELECT id, endpoint_id, queue FROM todos WHERE endpoint_id = %s"
                    " AND idempotency_key = %s AND state IN ('pending', 'claimed')",
                    (todo["endpoint_id"], todo["idempotency_key"]),
                )
                live = await cur.fetchone()
                if live is not None:
                    out.append({**live, "created": False})
            return DeliveryOutcome(event_id, True, False, out)

    async def _redelivery(self, conn: Any, source: str, external_id: str) -> DeliveryOutcome:
        cur = await conn.execute(
            "SELECT id, routing_trace FROM events WHERE source = %s AND external_id = %s",
            (source, external_id),
        )
        first = await cur.fetchone()
        assert first is not None, "ON CONFLICT saw a row that is not visible"
        trace = first["routing_trace"] or {}
        if (trace.get("action") or {}).get("drop") is True:
            return DeliveryOutcome(first["id"], False, True)
        cur = await conn.execute(
            "SELECT id, endpoint_id, queue FROM todos WHERE event_id = %s"
            " ORDER BY created_at, id",
            (first["id"],),
        )
        rows = await cur.fetchall()
        return DeliveryOutcome(first["id"], False, False, [{**r, "created": False} for r in rows])

    async def get_event(self, event_id: str) -> Row | None:
        if not is_uuid(event_id):
            return None
        return await self.db.fetchone("SELECT * FROM events WHERE id = %s", (event_id,))

    async def list_events(
        self,
        webhook_id: str,
        *,
        disposition: str | None,
        limit: int,
        before: tuple[Any, str] | None,
    ) -> list[Row]:
        """Newest first; ``before`` is a (received_at, id) keyset cursor."""
        where = ["webhook_id = %(w)s"]
        params: dict[str, Any] = {"w": webhook_id, "limit": limit}
        if disposition == "dropped":
            where.append("(routing_trace -> 'action' ->> 'drop') = 'true'")
        elif disposition == "routed":
            where.append("coalesce(routing_trace -> 'action' ->> 'drop', 'false') <> 'true'")
        if before is not None:
            where.append("(received_at, id) < (%(ts)s, %(id)s)")
            params.update(ts=before[0], id=before[1])
        return await self.db.fetchall(
            "SELECT id, webhook_id, source, kind, external_id, verified, trust_mode, size,"
            " content_type, received_at, routing_trace FROM events WHERE "
            + " AND ".join(where)
            + " ORDER BY received_at DESC, id DESC LIMIT %(limit)s",
            params,
        )

    async def notify(self, channel: str, payload: str) -> None:
        async with self.db.conn() as conn:
            await conn.execute("SELECT pg_notify(%s, %s)", (channel, payload))
