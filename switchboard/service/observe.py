"""One observation per delivery: the metrics it moves and its structured log line."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from .. import metrics
from ..loghygiene import redact
from ..logsetup import clean_fields, write_clean_info
from ..pgtext import clean_text
from ..routing.model import STAGE_CAUSES

log = logging.getLogger("switchboard.delivery")

#: A refusal's text is the source's; it is logged (never a label), cut to this length.
_DETAIL_MAX = 200

#: ``[log] deliveries``: a line per delivery, or the routine ones summed up each second.
DELIVERY_LOG_MODES = ("each", "summary")

#: How long a summary line's window is, in seconds.
SUMMARY_S = 1.0


@dataclass
class Observation:
    """What one delivery came to, filled in as ``ingest`` goes; never a secret or a payload.

    ``started`` is when it arrived (``time.monotonic()``), None when that is not known.
    """

    started: float | None
    source: str = "unknown"
    webhook_id: str | None = None
    status: int = 500
    kind: str | None = None
    event_id: str | None = None
    verify_detail: str | None = None
    verify_reason: str = "other"
    disposition: str | None = None
    trace: dict[str, Any] = field(default_factory=dict)
    todos_created: int = 0
    handshake: bool = False
    #: Seconds its routing stages took, and its write (None: it never got that far). An
    #: operator reading one slow delivery's line sees which of the two it waited on.
    route_s: float | None = None
    record_s: float | None = None


def _fault_causes(trace: dict[str, Any]) -> list[str]:
    return [str(f.get("cause")) for f in trace.get("faults") or () if isinstance(f, dict)]


def _failed_stages(trace: dict[str, Any]) -> list[str]:
    """The stages a whole-stage fault names (their names are registered stages: bounded)."""
    return [
        str(f["stage"]) for f in trace.get("faults") or () if isinstance(f, dict) and "stage" in f
    ]


def observe_delivery(
    d: Observation, now: float, *, per_webhook: bool = False, summary: bool = False
) -> None:
    """Count ``d`` and log its line; never raises (an observation never fails a delivery).

    ``summary`` (``[log] deliveries = "summary"``): a routine delivery (answered 2xx, no
    fault, no failed stage) is added to this process's line of the second instead of
    getting its own; every other delivery still gets its own line.
    """
    try:
        _observe(d, now, per_webhook, summary)
    except Exception:  # pragma: no cover - a bug here must cost a line, not a delivery
        log.exception("could not record a delivery's metrics")


def _observe(d: Observation, now: float, per_webhook: bool, summary: bool) -> None:
    latency = None if d.started is None else max(0.0, now - d.started)
    status = str(d.status)
    reason = d.verify_reason if d.status == 401 else "none"
    metrics.series(metrics.DELIVERIES, d.source, status, reason).inc()
    if latency is not None:
        metrics.series(metrics.INGEST_LATENCY, status).observe(latency)
    if per_webhook and d.webhook_id:
        metrics.WEBHOOK_DELIVERIES.labels(d.webhook_id, status).inc()
    faults = _fault_causes(d.trace)
    stage = cause = None
    failed: list[str] = []
    if d.disposition is not None:
        # Labels come from the trace's enums (schemas/trace.schema.json), so they are bounded.
        stage = str(d.trace.get("stage") or "unknown")
        cause = str(d.trace.get("cause") or ("drop" if d.disposition == "dropped" else "none"))
        fault = faults[0] if faults else "none"
        metrics.series(metrics.OUTCOMES, stage, cause, d.disposition, fault).inc()
        if per_webhook and d.webhook_id:
            metrics.WEBHOOK_OUTCOMES.labels(d.webhook_id, stage, cause).inc()
        failed = _failed_stages(d.trace)
        for fault in faults:
            if fault not in STAGE_CAUSES:
                metrics.RULE_FAULTS.labels(fault).inc()
        for name in failed:
            metrics.STAGE_ERRORS.labels(name).inc()
        if d.todos_created:
            metrics.TODOS_CREATED.inc(d.todos_created)
    if summary and 200 <= d.status < 300 and not faults and not failed:
        if _SUMMARY.add(d, latency):
            return
    line = {
        "webhook_id": d.webhook_id,
        "event_id": d.event_id,
        "source": d.source,
        # the producer's words: redacted here, so the formatter need not scan the whole line
        "kind": None if d.kind is None else redact(d.kind),
        "status": d.status,
        "disposition": d.disposition,
        "stage": stage,
        "cause": cause,
        "faults": faults,
        "latency_ms": None if latency is None else round(latency * 1000, 1),
        "todos_created": d.todos_created,
    }
    if d.route_s is not None:
        line["route_ms"] = _ms(d.route_s)
    if d.record_s is not None:
        line["record_ms"] = _ms(d.record_s)
    if failed:
        # the default decided because these stages misbehaved: name them, as /metrics does
        line["failed_stages"] = failed
    if d.handshake:
        line["handshake"] = True
    if d.status == 401:
        line["verify_reason"] = reason
        line["verify_detail"] = redact(clean_text((d.verify_detail or "")[:_DETAIL_MAX]))
    _emit("delivery %s %s", (d.status, d.disposition or _WHY.get(d.status, "refused")), line)


def _emit(msg: str, args: tuple[Any, ...], line: dict[str, Any]) -> None:
    """An INFO record on the delivery logger, its fields already clean. Built here rather
    than by ``log.info``: that would walk the stack for the caller's file and line (a tenth
    of the line's cost), which the delivery line never prints."""
    if log.isEnabledFor(logging.INFO) and not write_clean_info(log, msg, args, line):
        log.handle(
            log.makeRecord(
                log.name, logging.INFO, __file__, 0, msg, args, None, "observe_delivery",
                clean_fields(**line),
            )
        )  # fmt: skip


class _Summary:
    """The routine deliveries of this process's current second, logged as one line when it
    ends (a timer on the event loop) or when the process stops (:func:`flush_summary`)."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.count = 0
        self.todos = 0
        self.latencies: list[float] = []
        self.routes: list[float] = []
        self.records: list[float] = []
        self.dispositions: dict[str, int] = {}
        self.sources: dict[str, int] = {}
        self.since = time.monotonic()
        self.timer: asyncio.TimerHandle | None = None

    def add(self, d: Observation, latency: float | None) -> bool:
        """Counted into the current window; False (log it alone) outside an event loop."""
        if self.timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return False
            self.since = time.monotonic()
            self.timer = loop.call_later(SUMMARY_S, self.flush)
        self.count += 1
        self.todos += d.todos_created
        if latency is not None:
            self.latencies.append(latency)
        if d.route_s is not None:
            self.routes.append(d.route_s)
        if d.record_s is not None:
            self.records.append(d.record_s)
        what = d.disposition or _WHY.get(d.status, "accepted")
        self.dispositions[what] = self.dispositions.get(what, 0) + 1
        self.sources[d.source] = self.sources.get(d.source, 0) + 1
        return True

    def flush(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if self.count:
            window = max(0.0, time.monotonic() - self.since)
            line: dict[str, Any] = {
                "deliveries": self.count,
                "window_s": round(window, 2),
                "dispositions": dict(sorted(self.dispositions.items())),
                "sources": dict(sorted(self.sources.items())),
                "todos_created": self.todos,
            }
            for name, values in (
                ("latency", self.latencies),
                ("route", self.routes),
                ("record", self.records),
            ):
                ordered = sorted(values)
                line[f"{name}_ms_p50"] = _ms(ordered[len(ordered) // 2]) if ordered else None
                line[f"{name}_ms_max"] = _ms(ordered[-1]) if ordered else None
            try:
                _emit("deliveries %d in %.1f s", (self.count, window), line)
            except Exception:  # pragma: no cover - see observe_delivery
                log.exception("could not log a delivery summary")
        self._reset()


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


_SUMMARY = _Summary()


def flush_summary() -> None:
    """Log the summary of the deliveries counted so far (a stopping process's last one)."""
    _SUMMARY.flush()


_WHY = {
    200: "handshake",
    401: "unverified",
    404: "unknown webhook",
    413: "too large",
    431: "headers too large",
    503: "unavailable",
}


def sink_failed(name: str) -> None:
    """Count one sink call that raised (the sink's own line says why)."""
    try:
        metrics.SINK_FAILURES.labels(name).inc()
    except Exception:  # pragma: no cover - see observe_delivery
        log.exception("could not count a sink failure")


def observe_refusal(status: int) -> None:
    """Count and log an ingest request refused before its webhook was looked up (408, 413,
    417, 431)."""
    observe_delivery(Observation(started=None, status=status), 0.0)
