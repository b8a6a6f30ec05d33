"""The webhooks list, one webhook's deliveries (with its waiting counts and refusals), and
one delivery: every read through the service layer as the signed-in endpoint."""

from __future__ import annotations

import datetime as dt
from typing import Any
from urllib.parse import urlencode

from sanic import HTTPResponse, Request

from switchboard.errors import InvalidArgument, NotFound, SwitchboardError
from switchboard.service import events as events_svc
from switchboard.service import history, overview, refusals, webhooks
from switchboard.service.events import encode_cursor

from . import charts
from .surface import Surface
from .trace import decided_by, explain, reroutes, stage_text, verdict_text, waited

Row = dict[str, Any]
PAGE = 25
#: Stored events one deliveries page reads at most while filtering by kind / verified.
SCAN_MAX = 1000
#: Refusals the webhook page shows.
REFUSALS_SHOWN = 10


def _age_s(ev: Row, now: dt.datetime) -> float:
    return (now - dt.datetime.fromisoformat(ev["received_at"])).total_seconds()


def _cursor(ev: Row) -> str:
    return encode_cursor(
        {"received_at": dt.datetime.fromisoformat(ev["received_at"]), "id": ev["event_id"]}
    )


class Deliveries:
    def __init__(self, c: Surface) -> None:
        self.c = c
        self.rt = c.rt

    async def _summary(self, who: Row, hook: Row, now: dt.datetime) -> Row:
        hours = await overview.hourly(self.rt, who, hook["webhook_id"], now=now)
        routes = await webhooks.list_routes(self.rt, who, hook["webhook_id"])
        return {**hook, "routes": routes["routes"], "hours": hours, "totals": charts.totals(hours)}

    async def webhook_list(self, request: Request, who: Row) -> HTTPResponse:
        now = dt.datetime.now(dt.UTC)
        async with self.rt.store.db.snapshot():  # every webhook's summary at one moment
            listed = await webhooks.list_webhooks(self.rt, who)
            hooks = [await self._summary(who, h, now) for h in listed["webhooks"]]
        for h in hooks:
            h["chart"] = charts.svg(
                h["hours"], width=260, height=72, label="deliveries per hour, last 24 h"
            )
        return self.c.render(
            request, "webhooks.html", who=who, hooks=hooks, outcomes=charts.OUTCOMES
        )

    async def webhook(self, request: Request, who: Row, webhook_id: str) -> HTTPResponse:
        # One snapshot: the chart's counts, the deliveries, their todos, what waits and the
        # refusals are the database at one moment, under live ingest too.
        async with self.rt.store.db.snapshot():
            return await self._webhook(request, who, webhook_id)

    async def _webhook(self, request: Request, who: Row, webhook_id: str) -> HTTPResponse:
        now = dt.datetime.now(dt.UTC)
        hook = await webhooks.owned_webhook(self.rt, who, webhook_id)
        summary = await self._summary(who, webhooks.webhook_view(self.rt, hook), now)
        summary["chart"] = charts.svg(
            summary["hours"], width=720, height=180, label="deliveries per hour, last 24 h"
        )
        args = request.args
        filters = {
            "disposition": args.get("disposition") or "",
            "kind": args.get("kind") or "",
            "verified": args.get("verified") or "",
        }
        if filters["verified"] not in ("", "yes", "no"):
            raise InvalidArgument("verified: must be yes or no")
        rows, next_cursor = await self._deliveries(who, hook["id"], filters, args.get("cursor"))
        titles = await overview.todo_titles(self.rt, who, hook["id"], [r["event_id"] for r in rows])
        for r in rows:
            r["todos"] = titles.get(r["event_id"], [])
            r["decided_by"] = decided_by(r.get("routing_trace"), r.get("disposition"))
            r["outcome"] = charts.outcome(r)
            r["waited"] = waited(_age_s(r, now)) if r.get("disposition") == "pending" else None
        more = None
        if next_cursor:
            more = "?" + urlencode(
                {**{k: v for k, v in filters.items() if v}, "cursor": next_cursor}
            )
        wait = await overview.waiting(self.rt, who, hook["id"], now=now)
        for doc in wait.values():
            doc["oldest"] = waited(doc["oldest_age_s"])
        refused = await refusals.list_refusals(
            self.rt, who, hook["id"], limit=min(REFUSALS_SHOWN, max(self.rt.store.refusals.keep, 1))
        )
        return self.c.render(
            request,
            "webhook.html",
            who=who,
            hook=summary,
            rows=rows,
            filters=filters,
            more=more,
            outcomes=charts.OUTCOMES,
            dispositions=events_svc.DISPOSITIONS,
            waiting=wait,
            refused=refused,
            now_utc=now.strftime("%Y-%m-%d %H:%M"),
        )

    async def _deliveries(
        self, who: Row, webhook_id: str, filters: dict[str, str], cursor: str | None
    ) -> tuple[list[Row], str | None]:
        """One page of the webhook's deliveries, newest first, filtered; and the next cursor."""
        rows: list[Row] = []
        scanned = 0
        last: Row | None = None
        while True:
            got = await events_svc.list_events(
                self.rt,
                who,
                webhook_id,
                disposition=filters["disposition"] or None,
                limit=100,
                cursor=cursor,
            )
            for ev in got["events"]:
                scanned += 1
                if filters["kind"] and ev.get("kind") != filters["kind"]:
                    last = ev
                    continue
                if filters["verified"] and bool(ev.get("verified")) != (
                    filters["verified"] == "yes"
                ):
                    last = ev
                    continue
                if len(rows) == PAGE:
                    return rows, _cursor(rows[-1])
                rows.append(ev)
                last = ev
                if scanned >= SCAN_MAX:
                    return rows, _cursor(last)
            cursor = got["next_cursor"]
            if not cursor:
                return rows, None
            if scanned >= SCAN_MAX and last is not None:
                return rows, _cursor(last)

    async def delivery(self, request: Request, who: Row, event_id: str) -> HTTPResponse:
        event = await events_svc.show_event(self.rt, who, event_id)
        try:
            why = await history.explain_stored(self.rt, who, event_id)
            verdicts = [{**v, "text": verdict_text(v)} for v in why["verdicts"]]
            stages = [{**s, "text": stage_text(s)} for s in why.get("stages") or ()]
            why_error = None
        except (InvalidArgument, SwitchboardError) as exc:
            if isinstance(exc, NotFound):
                raise
            verdicts, stages, why_error = [], [], str(exc)
        try:
            envelope: Row | None = await overview.envelope(self.rt, who, event_id)
        except NotFound:
            envelope = None  # a deleted webhook's event: its rules are gone with it
        pending = None
        if event.get("disposition") == "pending":
            pending = waited(_age_s(event, dt.datetime.now(dt.UTC)))
        return self.c.render(
            request,
            "delivery.html",
            who=who,
            event=event,
            story=explain(event.get("routing_trace"), event.get("disposition")),
            reroutes=reroutes(event.get("routing_trace")),
            envelope=envelope,
            pending=pending,
            verdicts=verdicts,
            stages=stages,
            why_error=why_error,
        )
