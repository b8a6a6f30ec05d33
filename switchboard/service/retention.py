"""Event retention: which events have expired, the plan of a prune, and the prune itself.

``[retention] events_days`` (absent: forever) sets how long events are kept; a webhook's
routing config may set its own ``events_days`` (set_webhook_policy; 0 or null inherit).
Events of deleted webhooks follow the server's setting. Pending events (a deferred stage's
decision still to come) are never pruned; held ones are pruned like any other, so a held
delivery older than the retention can no longer be released. Todos keep their snapshot
(their ``event_id`` becomes null) and once claims stay: the design's "event retention must
not release a claim".
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Callable
from typing import Any

from ..errors import InvalidArgument, NotFound
from ..runtime import Runtime
from ..store.db import is_uuid
from ..store.retention import Cutoff
from .common import clip

#: Between two batches of one run the pruner idles this many times as long as the batch
#: took (and at least BATCH_PAUSE_S): it has the database a quarter of the time at most, so
#: live ingest keeps the rest (bench/prune.py measured a 25-43 % slowdown with a fixed 20 ms
#: pause on a loaded 2-core machine).
PACE = 3.0
BATCH_PAUSE_S = 0.02


def settings(rt: Runtime) -> tuple[int | None, float, int]:
    """``[retention]``'s events_days (None: forever), interval_s and batch_size."""
    section = rt.config.section("retention")
    days = section.get("events_days")
    return (
        int(days) if days else None,
        float(section.get("interval_s", 600.0)),
        int(section.get("batch_size", 1000)),
    )


async def configured_cutoffs(rt: Runtime, now: dt.datetime | None = None) -> list[Cutoff]:
    """The cutoffs the configuration sets: one per webhook that keeps events for a limited
    time (its own ``events_days``, else the server's), and the deleted webhooks' events
    (the server's). Nothing when neither the server nor any webhook limits retention."""
    now = now or dt.datetime.now(dt.UTC)
    days, _interval, _batch = settings(rt)
    overrides = await rt.store.retention_overrides()
    webhooks = await rt.store.live_webhook_ids() if days is not None else list(overrides)
    out = []
    for webhook_id in webhooks:
        keep = overrides.get(webhook_id, days)
        if keep is not None:
            out.append(Cutoff("live", now - dt.timedelta(days=keep), webhook_id))
    if days is not None:
        out.append(Cutoff("detached", now - dt.timedelta(days=days)))
    return out


async def cutoffs_before(
    rt: Runtime, before: dt.datetime, webhook_id: str | None = None
) -> list[Cutoff]:
    """One cutoff for every event (or ``webhook_id``'s, live or deleted) received before
    ``before``, whatever the configured retention."""
    if before.tzinfo is None:
        raise InvalidArgument("before: a time with its zone (naive times are ambiguous)")
    if webhook_id is None:
        live = await rt.store.live_webhook_ids()
        return [*(Cutoff("live", before, w) for w in live), Cutoff("detached", before)]
    if not is_uuid(webhook_id):
        raise InvalidArgument(f"webhook: not a webhook id: {clip(repr(webhook_id))}")
    if webhook_id in await rt.store.live_webhook_ids():
        return [Cutoff("live", before, webhook_id)]
    if await rt.store.deleted_webhook_exists(webhook_id):
        return [Cutoff("deleted", before, webhook_id)]
    raise NotFound(f"webhook {clip(webhook_id)} not found")


def _iso(value: Any) -> str | None:
    return value.isoformat() if isinstance(value, dt.datetime) else None


async def plan(rt: Runtime, cutoffs: list[Cutoff]) -> dict[str, Any]:
    """How many events each cutoff would delete, with the oldest's and the newest's times
    (cutoffs that expire nothing are left out)."""
    rows = []
    for cutoff in cutoffs:
        row = await rt.store.expired_summary(cutoff)
        if row["events"]:
            rows.append(
                {
                    "webhook_id": cutoff.webhook_id,
                    "scope": cutoff.scope,
                    "before": cutoff.before.isoformat(),
                    "events": int(row["events"]),
                    "oldest": _iso(row["oldest"]),
                    "newest": _iso(row["newest"]),
                }
            )
    return {"webhooks": rows, "events": sum(r["events"] for r in rows)}


async def prune(
    rt: Runtime,
    cutoffs: list[Cutoff],
    *,
    wait: bool = True,
    stopping: Callable[[], bool] = lambda: False,
) -> dict[str, Any]:
    """Delete the events ``cutoffs`` expire, in batches of ``[retention] batch_size``, each
    its own short transaction under the prune lock (one batch at a time across servers),
    paced (:data:`PACE`) so that live ingest keeps most of the database.

    ``wait`` false (the background job): a batch that finds the lock held ends the run,
    another server is pruning. ``stopping`` is asked between batches (a shutdown).
    Returns the count per cutoff and in all, and whether the run was cut short.
    """
    _days, _interval, batch = settings(rt)
    rows: list[dict[str, Any]] = []
    cut = False
    for cutoff in cutoffs:
        deleted = 0
        while not (cut := cut or stopping()):
            started = time.monotonic()
            n = await rt.store.prune_batch(cutoff, batch, wait=wait)
            if n is None:
                cut = True
                break
            deleted += n
            if n < batch:
                break
            await asyncio.sleep(max(BATCH_PAUSE_S, PACE * (time.monotonic() - started)))
        if deleted:
            rows.append(
                {"webhook_id": cutoff.webhook_id, "scope": cutoff.scope, "deleted": deleted}
            )
        if cut:
            break
    return {"webhooks": rows, "deleted": sum(r["deleted"] for r in rows), "cut_short": cut}
