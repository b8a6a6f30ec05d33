"""SQL for re-routing stored deliveries: what each already has, and the todos it gains."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg.types.json import Jsonb

from ..errors import Conflict, NotFound, clip
from ..routing.workorder import ONCE_REPEAT
from .db import Database, Row
from .migrate import read_sync
from .outcome import ONCE_CLAIM, OnceClaim
from .rings import RUNG, Rings

#: What a scrape reads (``switchboard_held_events``): by ``idx_events_held`` (migration
#: 0090), bounded like the todo counts.
HELD_COUNT = "SELECT count(*) AS n FROM events WHERE disposition = 'held'"
HELD_COUNT_TIMEOUT_MS = 2000


def held_count_sync(dsn: str, timeout_s: float = 2.0) -> int:
    """:meth:`RerouteQueries.held_count` on a connection of its own (see
    :func:`~switchboard.store.migrate.read_sync`)."""
    rows = read_sync(dsn, HELD_COUNT, timeout_s)
    return int(rows[0]["n"]) if rows else 0


class RerouteQueries:
    db: Database
    rings: Rings

    async def held_count(self) -> int:
        """Deliveries stored ``held`` (``on_fault = "hold"``), every webhook's."""
        async with self.db.conn() as conn:
            async with conn.transaction():
                await conn.execute(f"SET LOCAL statement_timeout = {HELD_COUNT_TIMEOUT_MS}")
                cur = await conn.execute(HELD_COUNT)
                row = await cur.fetchone()
                return int(row["n"]) if row else 0

    async def reroute_state(
        self, event_ids: Sequence[str], version: int | None = None
    ) -> dict[str, Row]:
        """Per event: its stored trace, disposition, dedup key, the endpoints that have a
        todo from it (in any state: a re-route never makes a second one) and ``rerouted``:
        whether it was re-routed under ``version`` already."""
        rows = await self.db.fetchall(
            "SELECT e.id::text AS id, e.routing_trace, e.disposition, e.external_id,"
            " coalesce((SELECT array_agg(t.endpoint_id::text) FROM todos t"
            "           WHERE t.event_id = e.id), '{}') AS endpoints,"
            " coalesce(e.routing_trace -> 'reroutes', '[]'::jsonb) @> %s::jsonb AS rerouted"
            " FROM events e WHERE e.id = ANY(%s::uuid[])",
            (Jsonb([{"version": -1 if version is None else version}]), list(event_ids)),
        )
        return {str(r["id"]): r for r in rows}

    async def apply_reroutes(
        self, webhook_id: str, items: Sequence[Reroute], version: int
    ) -> list[Applied]:
        """The items in one transaction, by a few set-wise statements for the whole batch:
        each event's new todos (never where one from it exists, in any state), and the
        ``reroutes`` entry of ``version`` on its trace (once per version); its
        ``disposition``, when given, is the event's from now on (a released or re-routed
        drop).

        An item's ``once`` claim is taken first, as a live delivery takes it; when another
        event holds it the event gains no todo (its entry says ``once: "repeat"`` and who
        holds it) and ``repeat_disposition`` is its disposition. Answers, per item, the
        todos created (None: re-routed under this version before) and, for a repeat, the
        holder's event id.
        """
        if not items:
            return []
        async with self.db.tx() as conn:
            # Still there, and still at ``version``: a delete or a save during a long
            # apply ends it at the next batch, never after (held until this one commits).
            cur = await conn.execute(
                "SELECT (SELECT coalesce(max(v.version), 0) FROM routing_versions v"
                " WHERE v.webhook_id = w.id) AS version"
                " FROM endpoint_webhooks w WHERE w.id = %s FOR SHARE OF w",
                (webhook_id,),
            )
            hook = await cur.fetchone()
            if hook is None:
                raise NotFound(f"webhook {clip(webhook_id)} not found: deleted during the re-route")
            if int(hook["version"]) != version:
                raise Conflict(
                    f"webhook {clip(webhook_id)} is at version {hook['version']}, not {version}:"
                    " its rules changed during the re-route (the events re-routed before stay"
                    " so); plan again",
                    current_version=int(hook["version"]),
                )
            cur = await conn.execute(
                "SELECT id::text AS id FROM events WHERE id = ANY(%s::uuid[]) AND NOT"
                " coalesce(routing_trace -> 'reroutes', '[]'::jsonb) @> %s::jsonb"
                " ORDER BY id FOR UPDATE",
                ([i["event_id"] for i in items], Jsonb([{"version": version}])),
            )
            fresh = {r["id"] for r in await cur.fetchall()}
            holders: dict[str, str] = {}
            writes: list[Reroute] = []
            for item in items:
                if item["event_id"] not in fresh:
                    continue  # re-routed under this version before: nothing again
                once: OnceClaim | None = item.get("once")
                if once is not None:
                    cur = await conn.execute(ONCE_CLAIM, once.params(item["event_id"]))
                    held = await cur.fetchone()
                    assert held is not None
                    if str(held["event_id"]) != item["event_id"]:
                        holder = holders[item["event_id"]] = str(held["event_id"])
                        item = {
                            **item,
                            "entry": {**item["entry"], "once": ONCE_REPEAT, "held_by": holder},
                            "todos": [],
                            "disposition": item.get("repeat_disposition"),
                        }
                writes.append(item)
            created: dict[str, list[Row]] = {i["event_id"]: [] for i in writes}
            if writes:
                await conn.execute(_TRACES, (Jsonb([_trace_row(i) for i in writes]),))
                todos = [_todo_row(i["event_id"], t) for i in writes for t in i["todos"]]
                if todos:
                    cur = await conn.execute(
                        _TODOS, {"todos": Jsonb(todos), "ring": self.rings.channels}
                    )
                    for row in await cur.fetchall():
                        created[row["event_id"]].append(row)
        self.rings.committed(t for made in created.values() for t in made)
        return [
            (created[i["event_id"]], holders.get(i["event_id"]))
            if i["event_id"] in created
            else (None, None)
            for i in items
        ]


#: One ``store.apply_reroutes`` item: ``event_id``, ``todos``, ``entry``, ``disposition``,
#: ``once`` (an OnceClaim or None) and ``repeat_disposition``.
Reroute = dict[str, Any]
#: Per event: the todos created (None: re-routed under this version before) and, for a
#: once claim another event holds, that event's id.
Applied = tuple[list[Row] | None, str | None]

_TRACES = """
    UPDATE events e SET
        routing_trace = jsonb_set(e.routing_trace, '{reroutes}',
            coalesce(e.routing_trace -> 'reroutes', '[]'::jsonb) || jsonb_build_array(u.entry)),
        disposition = coalesce(u.disposition, e.disposition)
    FROM jsonb_to_recordset(%s::jsonb) AS u(id uuid, entry jsonb, disposition text)
    WHERE e.id = u.id
"""

# A todo per (event, endpoint) at most, whatever its state; never beside a live one with
# the same key (the partial unique index), as a live delivery's; the sinks' rings for them.
_TODOS = (
    """
    WITH td AS (
        INSERT INTO todos (endpoint_id, queue, idempotency_key, title, payload, event_id,
                           routing_trace, work_order)
        SELECT t.endpoint_id, t.queue, t.idempotency_key, t.title, t.payload, t.event_id,
               t.routing_trace, t.work_order
        FROM jsonb_to_recordset(%(todos)s::jsonb) AS t(endpoint_id uuid, queue text,
             idempotency_key text, title text, payload jsonb, event_id uuid,
             routing_trace jsonb, work_order jsonb)
        WHERE NOT EXISTS (SELECT 1 FROM todos o
                          WHERE o.event_id = t.event_id AND o.endpoint_id = t.endpoint_id)
        ON CONFLICT (endpoint_id, idempotency_key) WHERE state IN ('pending', 'claimed')
        DO NOTHING
        RETURNING id::text, endpoint_id::text, queue, event_id::text
    ), """
    + RUNG
    + """
    SELECT td.* FROM td, rung
"""
)


def _trace_row(item: Reroute) -> dict[str, Any]:
    return {"id": item["event_id"], "entry": item["entry"], "disposition": item["disposition"]}


def _todo_row(event_id: str, todo: dict[str, Any]) -> dict[str, Any]:
    return {**todo, "event_id": event_id}


__all__ = ["HELD_COUNT", "Applied", "RerouteQueries", "Reroute", "held_count_sync"]
