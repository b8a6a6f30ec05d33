"""SQL for dry runs over history: a webhook's stored deliveries, newest first, page by page."""

from __future__ import annotations

import datetime as dt
from typing import Any

from .db import Database, Row

#: What rebuilding a stored delivery's envelope needs (``routing.replay.stored_envelope``).
_COLUMNS = (
    "id, received_at, source, kind, trust_mode, verified, content_type, headers, body,"
    " routing_trace"
)


class HistoryQueries:
    db: Database

    async def history_page(
        self,
        webhook_id: str,
        *,
        limit: int,
        before: tuple[dt.datetime, str] | None = None,
        since: dt.datetime | None = None,
        disposition: str | None = None,
        event_ids: list[str] | None = None,
    ) -> list[Row]:
        """Up to ``limit`` of the webhook's events, newest first (``idx_events_webhook``).

        ``before`` is a (received_at, id) keyset position (exclusive); ``since`` the oldest
        ``received_at`` wanted; ``disposition`` and ``event_ids`` keep only those events
        (held ones by ``idx_events_held``). A page at a time, so memory stays flat whatever
        the window.
        """
        where, params = _window(webhook_id, limit, before, since, disposition, event_ids)
        return await self.db.fetchall(
            f"SELECT {_COLUMNS} FROM events WHERE "
            + where
            + " ORDER BY received_at DESC, id DESC LIMIT %(limit)s",
            params,
            binary=True,  # the bodies as they are: half the bytes of bytea's hex text
        )

    async def history_count(
        self,
        webhook_id: str,
        *,
        limit: int,
        before: tuple[dt.datetime, str] | None = None,
        since: dt.datetime | None = None,
        disposition: str | None = None,
        event_ids: list[str] | None = None,
    ) -> int:
        """How many events :meth:`history_page` would walk through, counting at most ``limit``."""
        where, params = _window(webhook_id, limit, before, since, disposition, event_ids)
        row = await self.db.fetchone(
            "SELECT count(*) AS n FROM (SELECT 1 FROM events WHERE "
            + where
            + " LIMIT %(limit)s) AS w",
            params,
        )
        return int(row["n"]) if row else 0


def _window(
    webhook_id: str,
    limit: int,
    before: tuple[dt.datetime, str] | None,
    since: dt.datetime | None,
    disposition: str | None = None,
    event_ids: list[str] | None = None,
) -> tuple[str, dict[str, Any]]:
    """The WHERE clause (and its parameters) of a page of a webhook's events, newest first."""
    where = ["webhook_id = %(w)s"]
    params: dict[str, Any] = {"w": webhook_id, "limit": limit}
    if before is not None:
        where.append("(received_at, id) < (%(ts)s, %(id)s)")
        params.update(ts=before[0], id=before[1])
    if since is not None:
        where.append("received_at >= %(since)s")
        params["since"] = since
    if disposition is not None:
        where.append("disposition = %(disposition)s")
        params["disposition"] = disposition
    if event_ids is not None:
        where.append("id = ANY(%(ids)s::uuid[])")
        params["ids"] = event_ids
    return " AND ".join(where), params
