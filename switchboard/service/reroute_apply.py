"""One re-routed event, as live routing would take it: its once claim, work order, todos,
trace entry, and the sinks (the doorbell) for the todos it gains."""

from __future__ import annotations

import datetime as dt
from typing import Any

from ..pgtext import clean_json
from ..routing.model import (
    DISPOSITION_DROPPED,
    DISPOSITION_HELD,
    DISPOSITION_REPEAT,
    DISPOSITION_ROUTED,
    Decision,
)
from ..routing.replay import stored_envelope
from ..routing.workorder import ONCE_CLAIMED, ONCE_REPEAT, work_order
from ..runtime import Runtime
from ..store import OnceClaim, Row
from .ingest import subject_and_claim, todo_payload, todo_title


class Taken:
    """What a decision takes when it routes a stored event: its subject, its once claim
    (None: not a once decision, or nothing to key) and the trace live routing would store."""

    def __init__(
        self, rt: Runtime, webhook: Row, event: Row, decision: Decision, envelope: Any
    ) -> None:
        self.envelope: dict[str, Any] = (
            envelope
            if envelope is not None
            else stored_envelope(rt.registries.projections, event, str(webhook["id"]))
        )
        self.trace: dict[str, Any] = clean_json(decision.trace)
        self.subject: dict[str, Any] | None = None
        self.claim: OnceClaim | None = None
        if not decision.drop and (decision.once or decision.work_order):
            self.subject, self.claim = subject_and_claim(
                rt, webhook, decision, self.envelope, self.trace
            )

    async def once_state(
        self, rt: Runtime, event_id: str, planned: dict[str, str]
    ) -> dict[str, Any] | None:
        """A plan's view of the claim: ``claimed`` (free, or this event's) or ``repeat``
        (another event holds it, or takes it earlier in this plan: ``planned``, per once
        key), as a dry run shows it."""
        if self.claim is None:
            return None
        held = await rt.store.once_claim(self.claim.webhook_id, self.claim.key)
        holder = None if held is None else str(held["event_id"])
        holder = planned.setdefault(self.claim.key, holder or event_id)
        repeat = holder is not None and holder != event_id
        return {
            "state": ONCE_REPEAT if repeat else ONCE_CLAIMED,
            "once_key": self.claim.key,
            "held_by": holder,
        }


def prepared(
    rt: Runtime,
    webhook: Row,
    event: Row,
    had: Row,
    decision: Decision,
    taken: Taken,
    new: list[str],
    version: int,
    by: str,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """What applying ``decision`` to a stored event writes (``store.apply_reroutes``' item:
    the todos on ``new``, the once claim, the ``reroutes`` entry, the disposition of a held
    event), and the event the sinks get for the todos it gains (``ring_sinks_many``)."""
    hook = str(webhook["id"])
    trace = taken.trace
    entry = {
        "version": version,
        "by": by,
        "at": dt.datetime.now(dt.UTC).isoformat(),
        "action": trace.get("action"),
        "stage": trace.get("stage"),
        "rule_id": trace.get("rule_id"),
        "endpoints": list(decision.endpoints),
    }
    if "once" in trace:
        entry["once"] = trace["once"]
    envelope = taken.envelope
    rows: list[dict[str, Any]] = []
    if new:
        # as a live delivery's todo: the envelope is built clean (build_envelope)
        payload = todo_payload(envelope, {"webhook_id": hook, "external_id": had["external_id"]})
        order = (
            clean_json(work_order(decision, envelope, taken.subject))
            if decision.work_order
            else None
        )
        title = todo_title(envelope, rt.registries.projections)
        todo_trace = {**trace, "reroute": {"version": version, "by": by}}
        rows = [
            {
                "endpoint_id": endpoint,
                "queue": decision.queue,
                "idempotency_key": had["external_id"],
                "title": title,
                "payload": payload,
                "routing_trace": todo_trace,
                "work_order": order,
            }
            for endpoint in new
        ]
    was_held = had["disposition"] == DISPOSITION_HELD
    if was_held:
        disposition: str | None = DISPOSITION_DROPPED if decision.drop else DISPOSITION_ROUTED
    else:
        disposition = DISPOSITION_ROUTED if new else None
    item = {
        "event_id": str(event["id"]),
        "todos": rows,
        "entry": entry,
        "disposition": disposition,
        "once": taken.claim if new else None,
        # a held delivery whose claim another event holds ends as live would store it
        "repeat_disposition": DISPOSITION_REPEAT if was_held else None,
    }
    sink_event = {
        "id": str(event["id"]),
        "webhook_id": hook,
        "source": event["source"],
        "kind": event.get("kind"),
        "external_id": had["external_id"],
        "headers": event.get("headers") or {},
        "raw_headers": b"",
        "body": bytes(event["body"]),
        "content_type": event.get("content_type"),
        "size": len(bytes(event["body"])),
        "verified": event["verified"],
        "trust_mode": event["trust_mode"],
        "verify_detail": None,
        "routing_trace": had["routing_trace"],
        "disposition": DISPOSITION_ROUTED,
        # what the stages saw, as a live delivery hands it to the sinks
        "envelope": envelope,
    }
    return item, sink_event


__all__ = ["Taken", "prepared"]
