"""The host's Prometheus series and the text a scrape answers (labels bounded by design)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from .contract.sources import REASON_OTHER, reason_code
from .contract.sources import REASONS as CONTRACT_REASONS

#: The environment variable prometheus-client reads (at import) to write per-process files.
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

#: Latency buckets in seconds: a delivery is milliseconds; a slow LLM stage is seconds.
LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)

DELIVERIES = Counter(
    "switchboard_deliveries",
    "Deliveries received, by source, HTTP status and (for 401) verification reason",
    ["source", "status", "reason"],
)
WEBHOOK_DELIVERIES = Counter(
    "switchboard_webhook_deliveries",
    "Deliveries received per webhook (only with [metrics] per_webhook = true)",
    ["webhook_id", "status"],
)
OUTCOMES = Counter(
    "switchboard_routing_outcomes",
    "Routed deliveries by the deciding stage, its cause, the "
    "disposition and the first fault that degraded it",
    ["stage", "cause", "disposition", "fault"],
)
WEBHOOK_OUTCOMES = Counter(
    "switchboard_webhook_routing_outcomes",
    "Routing outcomes per webhook (only with [metrics] per_webhook = true)",
    ["webhook_id", "stage", "cause"],
)
RULE_FAULTS = Counter(
    "switchboard_rule_faults", "Rule and sandbox faults reported by routing, by cause", ["cause"]
)
STAGE_ERRORS = Counter(
    "switchboard_stage_errors",
    "Deliveries a routing stage failed (raised, answered garbage, wrote a bad trace, or went "
    "past its budget: they took the default), by stage",
    ["stage"],
)
TODOS_CREATED = Counter("switchboard_todos_created", "Todos created by deliveries")
INGEST_LATENCY = Histogram(
    "switchboard_ingest_latency_seconds",
    "Time from a delivery's arrival to its reply (verify, route, record)",
    ["status"],
    buckets=LATENCY_BUCKETS,
)
DEFERRED_SECONDS = Histogram(
    "switchboard_deferred_seconds",
    "Time from a deferred event's receipt to its decision by the triage worker, by stage",
    ["stage"],
    buckets=(*LATENCY_BUCKETS, 60.0, 300.0, 900.0, 3600.0),
)
#: What LLM providers billed: their reported usage, else the llm stage's estimate.
LLM_TOKENS = Counter(
    "switchboard_llm_tokens", "Tokens of LLM triage calls, by kind (prompt, completion)", ["kind"]
)
#: Batch sizes: one delivery alone up to a full batch of ``[ingest] batch_max``.
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
STORE_BATCH = Histogram(
    "switchboard_store_batch_size",
    "Deliveries handled together by one database round, by "
    "step (resolve: token lookups; write: delivery transactions)",
    ["step"],
    buckets=BATCH_BUCKETS,
)
REFUSALS_UNRECORDED = Counter(
    "switchboard_refusals_unrecorded",
    "Refused deliveries that could not be recorded (the database failed; they were answered)",
)
SINK_FAILURES = Counter("switchboard_sink_failures", "Sink calls that raised, by sink", ["sink"])
SINK_RINGS = Counter(
    "switchboard_sink_rings",
    "NOTIFYs sent at commit for sinks rung there (at_commit), by sink: one per endpoint and"
    " queue a committed transaction gave new todos",
    ["sink"],
)

#: Every documented value of the ``reason`` label of a 401 (``none`` for every other
#: status): the sources' refusal codes. A source's own codes (``refusal_reasons``) add to it.
REASONS = CONTRACT_REASONS


#: The labelled series asked for on every delivery, kept (see :func:`series`).
_SERIES: dict[tuple[object, tuple[str, ...]], Any] = {}
#: Past this many, the kept series are dropped and asked for again (labels are bounded by
#: design: this only caps a bug).
_SERIES_MAX = 4096


def series(metric: Any, *labels: str) -> Any:
    """``metric.labels(*labels)``, kept: prometheus-client checks and converts the labels
    and takes a lock on every call, for the same few series each delivery."""
    key = (metric, labels)
    found = _SERIES.get(key)
    if found is None:
        if len(_SERIES) >= _SERIES_MAX:
            _SERIES.clear()
        found = _SERIES[key] = metric.labels(*labels)
    return found


def verification_reason(reason: object, source: object = None) -> str:
    """The ``reason`` label of a refusal with code ``reason`` from ``source``.

    The code is the source's (``Verification.reason``), never read from its message: a
    documented code is its own label, and so is a code ``source`` declares in its
    ``refusal_reasons``; anything else (no code, a code not declared) is ``other``, so a
    source cannot grow the series without bound.
    """
    code = reason_code(reason)
    if code in REASONS:
        return code
    declared = getattr(source, "refusal_reasons", None) or ()
    if isinstance(declared, (tuple, list, frozenset, set)) and code in declared:
        return code
    return REASON_OTHER


#: At most this many queues get their own ``queue`` label on the todo gauge by default.
DEFAULT_MAX_QUEUES = 50
OTHER_QUEUE = "other"


def multiprocess() -> bool:
    """True when this process writes its series to files that a scrape sums (``serve --workers``)."""
    return bool(os.environ.get(MULTIPROC_ENV))


def todo_family(rows: Iterable[Mapping[str, Any]], max_queues: int) -> GaugeMetricFamily:
    """``switchboard_todos{queue, state}`` from grouped ``(queue, state, n)`` rows.

    Queue names are owner-chosen: the ``max_queues`` busiest keep their name, the rest are
    summed under ``queue="other"`` so a tenant cannot grow the series without bound.
    """
    family = GaugeMetricFamily(
        "switchboard_todos",
        "Open and dead todos by queue and state (read from the database at scrape)",
        labels=["queue", "state"],
    )
    rows = list(rows)
    totals: dict[str, int] = {}
    for row in rows:
        totals[row["queue"]] = totals.get(row["queue"], 0) + int(row["n"])
    kept = set(sorted(totals, key=lambda q: (-totals[q], q))[:max_queues])
    summed: dict[tuple[str, str], int] = {}
    for row in rows:
        queue = row["queue"] if row["queue"] in kept else OTHER_QUEUE
        key = (queue, row["state"])
        summed[key] = summed.get(key, 0) + int(row["n"])
    for (queue, state), n in sorted(summed.items()):
        family.add_metric([queue, state], n)
    return family


def todo_age_family(seconds: float) -> GaugeMetricFamily:
    """``switchboard_todos_age_seconds``: how old the values of ``switchboard_todos`` are."""
    family = GaugeMetricFamily(
        "switchboard_todos_age_seconds",
        "Seconds since switchboard_todos was read (0: at this scrape; more: the database"
        " did not answer in time, so the last values read are served)",
    )
    family.add_metric([], round(seconds, 3))
    return family


def pending_family(counts: Mapping[str, int], stages: Iterable[str] = ()) -> GaugeMetricFamily:
    """``switchboard_pending_events{stage}``: events a deferred stage has yet to decide
    (every stage of ``stages`` answers, 0 when it has none)."""
    family = GaugeMetricFamily(
        "switchboard_pending_events",
        "Events waiting for a deferred routing stage (read from the database at scrape)",
        labels=["stage"],
    )
    for stage, n in sorted({**dict.fromkeys(stages, 0), **counts}.items()):
        family.add_metric([stage], n)
    return family


def held_family(count: int) -> GaugeMetricFamily:
    """``switchboard_held_events``: deliveries held (``on_fault = "hold"``) until a release."""
    family = GaugeMetricFamily(
        "switchboard_held_events",
        "Deliveries stored held (their routing faulted under on_fault = hold) waiting for"
        " release_held_events (read from the database at scrape)",
    )
    family.add_metric([], count)
    return family


class _Families(Collector):
    """A collector over families already built (the todo gauge, read before the scrape)."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self.families = list(families)

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def process_collector() -> Collector:
    """What this process's series are: every worker's files summed, or this process's registry."""
    if multiprocess():
        registry = CollectorRegistry()
        MultiProcessCollector(registry)
        return registry
    return REGISTRY


def exposition(extra: Iterable[Metric] = ()) -> bytes:
    """The Prometheus text of every series plus ``extra`` families."""
    text = generate_latest(process_collector())
    extra = list(extra)
    if extra:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Families(extra))
        text += generate_latest(registry)
    return text
