"""Once claims the owner releases: the next matching delivery in that lane claims again.

A claim (``routing_once``) is keyed by the subject and the lane (queue) it was routed to,
per webhook. Releasing is the owner's, as a save is: the caller's human must own the
webhook; every release is recorded (``routing_once_releases``: who, when, which event held
it) and logged as one structured line.
"""

from __future__ import annotations

import logging
from typing import Any

from ..errors import InvalidArgument, NotFound
from ..logsetup import fields
from ..pgtext import clean_json
from ..routing.model import Decision
from ..routing.workorder import ONCE_CLAIMED, ONCE_NO_SUBJECT, ONCE_REPEAT, once_key, work_order
from ..runtime import Runtime
from ..store import Row
from .common import check_storable, clip, jsonable
from .ingest import subject_and_claim
from .versions import author_of
from .webhooks import owned_webhook

log = logging.getLogger("switchboard.rules")

LANE_MAX = 64
SUBJECT_MAX = 1000


def _text(value: Any, field: str, limit: int) -> str:
    if not isinstance(value, str) or not value or len(value) > limit:
        raise InvalidArgument(f"{field}: a non-empty string of at most {limit} characters")
    return str(check_storable(value, field))


async def release_once_claim(
    rt: Runtime,
    caller: Row | None,
    lane: Any,
    subject: Any,
    webhook_id: str | None = None,
) -> dict[str, Any]:
    """Release ``subject``'s claim in ``lane`` on one webhook, or on every webhook of the
    caller's human (the operator: ``webhook_id`` is required)."""
    lane = _text(lane, "lane", LANE_MAX)
    subject = _text(subject, "subject", SUBJECT_MAX)
    if webhook_id is not None:
        hooks = [await owned_webhook(rt, caller, webhook_id)]
    elif caller is not None:
        hooks = await rt.store.list_webhooks(str(caller["owner_human"]))
    else:
        raise InvalidArgument("webhook_id: required when the operator releases a claim")
    key = once_key(subject, lane)
    who = author_of(caller)
    rows = await rt.store.release_once([str(h["id"]) for h in hooks], key, lane, subject, who)
    if not rows:
        where = f"webhook {clip(webhook_id)}" if webhook_id else "any of your webhooks"
        raise NotFound(
            f"no once claim for subject {clip(repr(subject))} in lane {lane!r} on {where}"
        )
    for row in rows:
        log.info(
            "once claim released %s %s",
            row["webhook_id"],
            lane,
            extra=fields(
                event="once_released",
                webhook_id=str(row["webhook_id"]),
                lane=lane,
                once_key=key,
                event_id=str(row["event_id"]),
                author=who,
            ),
        )
    return {
        "lane": lane,
        "subject": subject,
        "once_key": key,
        "released": [
            jsonable(
                {
                    "webhook_id": r["webhook_id"],
                    "event_id": r["event_id"],
                    "claimed_at": r["claimed_at"],
                    "had_expired": bool(r["expired"]),
                }
            )
            for r in rows
        ],
        "released_by": who,
    }


async def dry_run_claim(
    rt: Runtime, webhook: Row, result: dict[str, Any], event_id: str | None
) -> None:
    """Add to a dry run's ``result`` what a live delivery's ``once`` claim would meet and
    the work order its todos would carry; the trace becomes the one live would store (with
    ``once`` and ``once_key``, or the ``repeat`` when another event holds the claim)."""
    trace = result["trace"]
    action = trace.get("action") or {}
    taken = result["decision"]
    once, wants_order = action.get("once") is True, action.get("work_order") is True
    if taken["drop"] or not (once or wants_order):
        return
    decision = Decision(
        False, taken["queue"], tuple(taken["endpoints"]), trace,
        once=once, work_order=wants_order,
    )  # fmt: skip
    trace = dict(trace)  # the claim writes its fields into the trace it is given
    subject, claim = subject_and_claim(rt, webhook, decision, result["envelope"], trace)
    if wants_order:
        result["work_order"] = clean_json(work_order(decision, result["envelope"], subject))
    if not once:
        return
    lane = str(taken["queue"])
    if claim is None:
        result["once"] = {"state": ONCE_NO_SUBJECT, "lane": lane}
        result["trace"] = trace
        return
    held = await rt.store.once_claim(str(webhook["id"]), claim.key)
    holder = None if held is None else str(held["event_id"])
    repeat = holder is not None and holder != event_id
    result["once"] = jsonable(
        {
            "state": ONCE_REPEAT if repeat else ONCE_CLAIMED,
            "lane": lane,
            "subject": subject["key"] if subject else None,
            "once_key": claim.key,
            "held_by": holder,
            "held_until": None if held is None else held["expires_at"],
            "ttl_s": claim.ttl_s,
        }
    )
    result["trace"] = claim.repeat_trace if repeat else trace
