"""The queues page: each queue the signed-in endpoint drains, its counts and its todos, with
a retry for dead ones (``service.todos.retry``, as the agent's own retry)."""

from __future__ import annotations

import datetime as dt
from typing import Any
from urllib.parse import quote

from sanic import HTTPResponse, Request

from switchboard.service import overview, todos

from .surface import Surface
from .trace import waited

Row = dict[str, Any]


class Queues:
    def __init__(self, c: Surface) -> None:
        self.c = c
        self.rt = c.rt

    async def page(self, request: Request, who: Row, notice: str | None = None) -> HTTPResponse:
        now = dt.datetime.now(dt.UTC)
        # One snapshot: a queue's count and the todos listed under it agree.
        async with self.rt.store.db.snapshot():
            counts = await overview.queues(self.rt, who, now=now)
            listed = [await overview.queue_todos(self.rt, who, q["queue"]) for q in counts]
        shown = []
        for q, rows in zip(counts, listed, strict=True):
            for t in rows:
                lease = t.get("lease_expires_at")
                t["lease"] = (
                    waited((dt.datetime.fromisoformat(lease) - now).total_seconds())
                    if lease and t["state"] == "claimed"
                    else None
                )
            shown.append({**q, "oldest": waited(q["oldest_pending_age_s"]), "todos": rows})
        return self.c.render(
            request, "queues.html", who=who, queues=shown, notice=notice, error=None
        )

    async def retry(self, request: Request, who: Row, todo_id: str) -> HTTPResponse:
        """POST: the dead todo pending again (another state is the service's conflict)."""
        await todos.retry(self.rt, who, todo_id)
        return self.c.go(request, "/console/queues?retried=" + quote(todo_id))

    async def index(self, request: Request, who: Row) -> HTTPResponse:
        retried = request.args.get("retried")
        notice = f"Todo {retried} is pending again." if retried else None
        return await self.page(request, who, notice)
