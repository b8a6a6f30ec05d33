"""The triage worker of every ``serve``: decides the events a deferred stage left pending.

One worker per deferred stage and process claims the oldest pending events (fair per
endpoint) under a lease, at most the stage's ``max_in_flight`` at once, runs the stage and
the ones after it exactly as the receiver would have (the webhook's grant and config as
they are now), and writes the decision, its todos and its ``once`` claim in one
transaction that also deletes the lease: a worker whose lease ran out (killed, or stalled)
writes nothing, so each event is decided once. The doorbell rings after that commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from typing import Any

from .. import metrics
from ..errors import StoreUnavailable
from ..logsetup import fields
from ..pgtext import clean_json
from ..routing.decide import default_decision
from ..routing.envelope import build_envelope
from ..routing.model import (
    CAUSE_STAGE_ERROR,
    DISPOSITION_DROPPED,
    STAGE_DEFAULT,
    Decision,
    Fault,
    NotYet,
    RoutingContext,
    RoutingStage,
    StageResult,
)
from ..routing.route import config_of, grant_for, route
from ..routing.stagecall import STORE_RETRY_S, budget_ms, stage_timeout_ms
from ..routing.trace import validate_trace
from ..runtime import Runtime
from . import wake
from .ingest import subject_and_claim, todo_fields
from .postpone import postpone
from .sinkrun import ring_sinks

log = logging.getLogger("switchboard.triage")

DEFAULT_MAX_IN_FLIGHT = 4
DEFAULT_MAX_ATTEMPTS = 3
#: How often a worker looks for work when nothing woke it (another process's deliveries,
#: a lease that ran out).
POLL_S = 0.5
#: A lease outlasts the stage's whole time budget by this much.
LEASE_MARGIN_S = 5.0
#: How long a stopping worker lets in-flight runs finish before it gives their leases back.
STOP_GRACE_S = 2.0
#: How long a stopping worker waits for the runs it cancelled to end (one cancelled inside
#: a statement on a frozen database waits 5 s for psycopg's cancel request: not waited).
CANCEL_WAIT_S = 0.5
#: A claimed row's key for when (``time.monotonic()``) this worker claimed it.
CLAIMED_AT = "claimed_at_monotonic"


def _positive(value: Any, default: int) -> int:
    return value if isinstance(value, int) and value > 0 else default


def deferred_stages(rt: Runtime) -> list[RoutingStage]:
    """The enabled stages that declare themselves deferred."""
    return [s for s in rt.stages if getattr(s, "deferred", False) is True]


def _fault(doc: dict[str, Any]) -> Fault:
    """A fault from its trace form (``Fault.to_json``)."""
    return Fault(
        rule_index=int(doc.get("rule_index", -1)),
        cause=str(doc.get("cause")),
        rule_id=doc.get("rule_id"),
        detail=doc.get("detail"),
        stage=doc.get("stage"),
    )


def _orphan(stage: str) -> Decision:
    """A pending event whose webhook was deleted: nothing is left to route it to."""
    fault = Fault.of_stage(stage, CAUSE_STAGE_ERROR, "the webhook was deleted while pending")
    trace = {
        "stage": STAGE_DEFAULT,
        "cause": CAUSE_STAGE_ERROR,
        "action": {"drop": True},
        "faults": [fault.to_json()],
    }
    return Decision(drop=True, queue=None, endpoints=(), trace=trace)


class TriageWorker:
    """Claims and decides the pending events of one deferred stage, in this process."""

    def __init__(self, rt: Runtime, stage: RoutingStage) -> None:
        self.rt = rt
        self.stage = stage
        self.max_in_flight = _positive(getattr(stage, "max_in_flight", None), DEFAULT_MAX_IN_FLIGHT)
        self.max_attempts = _positive(getattr(stage, "max_attempts", None), DEFAULT_MAX_ATTEMPTS)
        self.timeout_ms = budget_ms(stage, stage_timeout_ms(rt))
        self.lease_s = self.timeout_ms / 1000 + LEASE_MARGIN_S
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.in_flight: dict[tuple[str, int], asyncio.Task[None]] = {}
        self._bell = wake.bell()
        self._slot = asyncio.Event()
        self._loop: asyncio.Task[None] | None = None
        #: After a stage said "not yet" (a spent budget, its provider's calls all taken),
        #: claiming pauses this long, so a backlog is not claimed and postponed in a loop.
        self._resume_at = 0.0

    def start(self) -> None:
        self._loop = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Stop claiming; in-flight runs finish within the grace, or give their leases back.

        Bounded whatever the database does: a task cancelled inside a statement waits for
        psycopg's cancel request, which a frozen server never answers (5 s), so cancelled
        tasks get :data:`CANCEL_WAIT_S` to end, and a lease not given back (the database
        away) runs out instead."""
        wake.forget(self._bell)
        if self._loop is not None:
            self._loop.cancel()
            await asyncio.wait([self._loop], timeout=CANCEL_WAIT_S)
        running = dict(self.in_flight)
        if running:
            await asyncio.wait(running.values(), timeout=STOP_GRACE_S)
        left = {k: t for k, t in running.items() if not t.done()}
        for task in left.values():
            task.cancel()
        if not left:
            return
        await asyncio.wait(left.values(), timeout=CANCEL_WAIT_S)
        try:
            given = await self.rt.store.release_pending(self.owner, [k[0] for k in left])
        except StoreUnavailable as exc:
            log.warning(
                "triage %s: %d lease(s) not given back at stop, the database is unavailable"
                " (%s): they run out instead",
                self.stage.name,
                len(left),
                exc.detail or exc,
            )
            return
        log.info("triage %s: gave %d lease(s) back at stop", self.stage.name, given)

    async def _run(self) -> None:
        while True:
            free = self.max_in_flight - len(self.in_flight)
            if free <= 0:
                self._slot.clear()
                await self._slot.wait()
                continue
            pause = self._resume_at - time.monotonic()
            if pause > 0:
                await asyncio.sleep(pause)
            self._bell.clear()
            try:
                rows = await self.rt.store.claim_pending(
                    self.stage.name, self.owner, free, self.lease_s
                )
            except Exception as exc:  # the database is away: try again at the next poll
                log.warning("triage %s: cannot claim: %s", self.stage.name, type(exc).__name__)
                rows = []
            claimed = time.monotonic()
            for row in rows:
                row[CLAIMED_AT] = claimed
                # Keyed by the claim: this worker may take its own stalled lease over.
                key = (str(row["event_id"]), int(row["attempts"]))
                self.in_flight[key] = asyncio.get_running_loop().create_task(self._decide(row))
            if len(rows) < free:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._bell.wait(), POLL_S)

    async def _decide(self, row: dict[str, Any]) -> None:
        try:
            await self.decide(row)
        except NotYet as later:
            self._resume_at = time.monotonic() + min(later.retry_after_s, POLL_S)
            # Pending a while longer (a spent budget): claimable again after retry_after_s.
            until = float(row.get(CLAIMED_AT, time.monotonic())) + self.lease_s
            try:
                postponed = await postpone(
                    self.rt.store,
                    self.stage.name,
                    str(row["event_id"]),
                    self.owner,
                    later.retry_after_s,
                    until,
                )
            except Exception:
                log.exception("triage %s: event %s not postponed", self.stage.name, row["event_id"])
                return
            if postponed is None:
                return  # the database stayed away: said, and the lease runs out
            log.info(
                "triage %s: event %s waits %.0f s: %s",
                self.stage.name,
                row["event_id"],
                later.retry_after_s,
                later,
            )
        except asyncio.CancelledError:
            raise
        except StoreUnavailable as exc:
            # An expected outage: one line, no traceback. The lease stays, as below.
            log.warning(
                "triage %s: event %s not written, the database is unavailable (%s):"
                " claimed again when its lease runs out",
                self.stage.name,
                row["event_id"],
                exc.detail or exc,
            )
        except Exception:
            # The lease stays: it runs out and the event is claimed again (an attempt).
            log.exception("triage %s: event %s failed", self.stage.name, row["event_id"])
        finally:
            self.in_flight.pop((str(row["event_id"]), int(row["attempts"])), None)
            self._slot.set()

    async def decide(self, row: dict[str, Any]) -> None:
        """Route one claimed event from this stage on, and write what it came to."""
        rt = self.rt
        name = self.stage.name
        claimed = float(row.get(CLAIMED_AT, time.monotonic()))
        pending_trace = row["routing_trace"] or {}
        faults = [_fault(f) for f in pending_trace.get("faults") or () if isinstance(f, dict)]
        try:
            webhook = (
                await rt.store.resolve_webhook_by_id(str(row["webhook_id"]))
                if row["webhook_id"]
                else None
            )
        except StoreUnavailable:
            # Before any stage ran, nothing was asked: postponed with its attempt given
            # back, as a stage's own outage is (call_stage), not held to its lease and
            # claimed again as one more attempt.
            raise NotYet("the database is unavailable", STORE_RETRY_S) from None
        envelope: dict[str, Any] = {}
        if webhook is None:
            decision = _orphan(name)
        else:
            grant = grant_for(webhook)
            config = config_of(webhook)
            envelope = build_envelope(
                source=row["source"],
                kind=row["kind"],
                webhook_id=str(row["webhook_id"]),
                trust_mode=row["trust_mode"],
                verified=row["verified"],
                content_type=row["content_type"],
                headers=row["headers"] or {},
                body=bytes(row["body"]),
                projections=rt.registries.projections,
            )
            if row["attempts"] > self.max_attempts:
                ctx = RoutingContext(
                    webhook=webhook,
                    envelope=envelope,
                    grant=grant,
                    config=config,
                    faults=faults,
                    runtime=rt,
                )
                decision = await self._gave_up(ctx, row["attempts"] - 1)
            else:
                stages = list(rt.stages)
                at = next((i for i, s in enumerate(stages) if s is self.stage), None)
                decision = await route(
                    stages[at:] if at is not None else [self.stage],
                    webhook,
                    config,
                    envelope,
                    grant,
                    runtime=rt,
                    stage_timeout_ms=stage_timeout_ms(rt),
                    faults=faults,
                    deferred=True,
                )
        trace = clean_json(decision.trace)
        for key in ("secret",):  # what the receiver recorded of the delivery stays
            if key in pending_trace:
                trace[key] = pending_trace[key]
        # Receipt to decision: the wait before the claim (the database's clock) plus the
        # run since (the model call, in the llm stage's case).
        waited = float(row["waited_s"]) + (time.monotonic() - claimed)
        trace["deferred"] = {
            "stage": name,
            "attempts": min(int(row["attempts"]), self.max_attempts),
            "waited_ms": round(waited * 1000),
        }
        subject, once = (None, None)
        if webhook is not None:
            subject, once = subject_and_claim(rt, webhook, decision, envelope, trace)
        validate_trace(trace)
        todo = (
            todo_fields(rt, webhook, envelope, decision, subject, row["external_id"])
            if webhook is not None
            else {}
        )
        todo["external_id"] = row["external_id"]
        outcome = await rt.store.finish_pending(
            row["event_id"],
            self.owner,
            trace,
            decision.disposition,
            todo,
            list(decision.endpoints),
            once,
        )
        if outcome is None:
            log.info("triage %s: event %s was taken over", name, row["event_id"])
            return
        created = [t for t in outcome.todos if t["created"]]
        _observe(name, row, waited, trace, decision.disposition, len(created))
        event = {k: row[k] for k in _EVENT_KEYS}
        event.update(id=row["event_id"], routing_trace=trace, disposition=decision.disposition)
        if envelope:  # what the stages saw, as a live delivery's sinks get it
            event["envelope"] = envelope
        ring_sinks(rt, event, created)

    async def _gave_up(self, ctx: RoutingContext, attempts: int) -> Decision:
        """The attempts ran out (each claim's worker died or stalled past its lease)."""
        detail = f"no decision after {attempts} attempts (each lost its lease)"
        own = getattr(self.stage, "gave_up", None)
        if own is not None:
            try:
                result = own(ctx, attempts)
                if isinstance(result, StageResult) and isinstance(result.decision, Decision):
                    return result.decision
            except Exception:
                log.exception("triage %s: gave_up raised", self.stage.name)
        fault = Fault.of_stage(self.stage.name, CAUSE_STAGE_ERROR, detail)
        return default_decision(
            ctx.grant, ctx.config.default_action, [*ctx.faults, fault], cause=CAUSE_STAGE_ERROR
        )


def _observe(
    stage: str,
    row: dict[str, Any],
    waited: float,
    trace: dict[str, Any],
    disposition: str,
    todos: int,
) -> None:
    """The decision's metrics and its log line (never raises); ``waited``: seconds from
    receipt to decision."""
    try:
        metrics.DEFERRED_SECONDS.labels(stage).observe(waited)
        faults = [f.get("cause") for f in trace.get("faults") or () if isinstance(f, dict)]
        cause = trace.get("cause") or ("drop" if disposition == DISPOSITION_DROPPED else "none")
        metrics.OUTCOMES.labels(
            str(trace.get("stage")), str(cause), disposition, str(faults[0]) if faults else "none"
        ).inc()
        metrics.TODOS_CREATED.inc(todos)
        log.info(
            "deferred decision",
            extra=fields(
                event_id=str(row["event_id"]),
                webhook_id=str(row["webhook_id"]),
                stage=str(trace.get("stage")),
                cause=str(cause),
                disposition=disposition,
                attempts=int(row["attempts"]),
                waited_ms=round(waited * 1000),
            ),
        )
    except Exception:  # pragma: no cover - a metric never fails a decision
        log.exception("could not record a deferred decision's metrics")


_EVENT_KEYS = (
    "webhook_id",
    "source",
    "kind",
    "external_id",
    "headers",
    "raw_headers",
    "body",
    "content_type",
    "size",
    "verified",
    "trust_mode",
    "verify_detail",
)


class Triage:
    """This process's triage workers, one per deferred stage (started with the app)."""

    def __init__(self, rt: Runtime) -> None:
        self.workers = [TriageWorker(rt, s) for s in deferred_stages(rt)]

    def start(self) -> None:
        for worker in self.workers:
            worker.start()

    async def stop(self) -> None:
        await asyncio.gather(*(w.stop() for w in self.workers), return_exceptions=True)
