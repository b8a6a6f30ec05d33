"""SQL for an owner's overview: hourly delivery counts, queue counts, a queue's todos."""

from __future__ import annotations

import datetime as dt
from typing import Any

from .db import Database, Row

#: One delivery's outcome, as ``switchboard_console.charts.outcome`` names it: faulted (a
#: rule or stage faulted), dropped, default (no stage decided), else routed.
_OUTCOME = (
    "CASE WHEN coalesce(routing_trace->'faults', 'null'::jsonb)"
    "          NOT IN ('null'::jsonb, '[]'::jsonb, '{}'::jsonb, 'false'::jsonb)"
    " THEN 'faulted'"
    " WHEN disposition = 'dropped' THEN 'dropped'"
    " WHEN routing_trace->>'stage' = 'default' THEN 'default'"
    " ELSE 'routed' END"
)


class OverviewQueries:
    db: Database

    async def hourly_outcomes(self, webhook_id: str, now: dt.datetime, hours: int) -> list[Row]:
        """Per (hours ago, outcome) the count of the webhook's deliveries received in the last
        ``hours`` hours before ``now``: one aggregate over ``idx_events_webhook``."""
        return await self.db.fetchall(
            "SELECT floor(extract(epoch FROM (%(now)s - received_at)) / 3600)::int AS age,"
            f" {_OUTCOME} AS outcome, count(*)::int AS n"
            " FROM events WHERE webhook_id = %(w)s"
            " AND received_at > %(now)s - make_interval(hours => %(hours)s)"
            " AND received_at <= %(now)s"
            " GROUP BY 1, 2",
            {"w": webhook_id, "now": now, "hours": hours},
        )

    async def disposition_counts(self, webhook_id: str) -> dict[str, Row]:
        """Per disposition whose deliveries wait (pending, held): the count and the oldest
        ``received_at`` (``idx_events_webhook_disposition``)."""
        rows = await self.db.fetchall(
            "SELECT disposition, count(*)::int AS n, min(received_at) AS oldest"
            " FROM events WHERE webhook_id = %s AND disposition IN ('pending', 'held')"
            " GROUP BY disposition",
            (webhook_id,),
        )
        return {str(r["disposition"]): r for r in rows}

    async def queue_counts(self, endpoint_id: str, queues: list[str]) -> list[Row]:
        """Per queue of the endpoint's: pending, claimed and dead todos, and the oldest
        pending one's ``created_at``."""
        return await self.db.fetchall(
            "SELECT q.queue,"
            " count(t.id) FILTER (WHERE t.state = 'pending')::int AS pending,"
            " count(t.id) FILTER (WHERE t.state = 'claimed')::int AS claimed,"
            " count(t.id) FILTER (WHERE t.state = 'dead')::int AS dead,"
            " min(t.created_at) FILTER (WHERE t.state = 'pending') AS oldest_pending"
            " FROM unnest(%(queues)s::text[]) AS q(queue)"
            " LEFT JOIN todos t ON t.queue = q.queue AND t.endpoint_id = %(ep)s"
            "  AND t.state <> 'done'"
            " GROUP BY q.queue ORDER BY q.queue",
            {"ep": endpoint_id, "queues": queues},
        )

    async def queue_todos(self, endpoint_id: str, queue: str, limit: int) -> list[Row]:
        """The queue's open and dead todos (never done ones), dead first then oldest, each
        with the webhook its event came in on."""
        params: dict[str, Any] = {"ep": endpoint_id, "queue": queue, "limit": limit}
        return await self.db.fetchall(
            "SELECT t.id, t.queue, t.state, t.title, t.attempts, t.available_at,"
            " t.lease_expires_at, t.owner, t.created_at, t.event_id,"
            " coalesce(e.webhook_id, e.deleted_webhook_id) AS webhook_id"
            " FROM todos t LEFT JOIN events e ON e.id = t.event_id"
            " WHERE t.endpoint_id = %(ep)s AND t.queue = %(queue)s AND t.state <> 'done'"
            " ORDER BY (t.state = 'dead') DESC, t.created_at, t.id LIMIT %(limit)s",
            params,
        )

    async def todos_of_events(self, webhook_id: str, event_ids: list[str]) -> list[Row]:
        """The todos the webhook's events ``event_ids`` made: title, queue, state."""
        return await self.db.fetchall(
            "SELECT t.event_id::text AS event_id, t.title, t.queue, t.state"
            " FROM todos t JOIN events e ON e.id = t.event_id"
            " WHERE t.event_id = ANY(%s::uuid[]) AND e.webhook_id = %s"
            " ORDER BY t.created_at, t.id",
            (event_ids, webhook_id),
        )
