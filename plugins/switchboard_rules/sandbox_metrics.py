"""The rules stage's Prometheus series: sandbox latency, slot waits, envelope sizes, direct."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

#: An evaluation is milliseconds; a runaway one is cut at its event budget (seconds).
_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

EVALUATION = Histogram(
    "switchboard_sandbox_evaluation_seconds",
    "Rule evaluations in the sandbox, from holding a slot to the match (or the faults)",
    buckets=_BUCKETS,
)
SLOT_WAITS = Counter(
    "switchboard_sandbox_slot_waits",
    "Evaluations that found their rule set's frame in flight, their owner's share or the "
    "sandbox full and waited; outcome "
    "acquired (got a slot) or busy (gave up: the delivery took the default, sandbox_busy)",
    ["outcome"],
)
SLOT_WAIT = Histogram(
    "switchboard_sandbox_slot_wait_seconds",
    "How long an evaluation that had to wait waited for its slot",
    buckets=_BUCKETS,
)

ENVELOPE_BYTES = Histogram(
    "switchboard_sandbox_envelope_bytes",
    "Bytes of each live delivery's envelope sent to the sandbox; cut paths (only what the "
    "rule set can read, proven by reads.py) or whole (a rule may read anything)",
    ["cut"],
    buckets=(256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304),
)

GROUP_SIZE = Histogram(
    "switchboard_sandbox_group_size",
    "Deliveries of one rule set evaluated together in one frame (those that waited for "
    "their owner's slot at the same time; 1 when a delivery went alone)",
    buckets=(1, 2, 4, 8),
)

DIRECT = Counter(
    "switchboard_rules_direct_evaluations",
    "Live deliveries whose rules are all simple (plugins.rules.direct): "
    "decided (in the server, jq's answer certain), deferred (sent to the sandbox: a "
    "value or an error only jq may answer for), failed (deciding them in the server "
    "raised, a bug logged once) or slow (decided there past its CPU limit, logged): after "
    "failed or slow, that rule set goes to the sandbox",
    ["outcome"],
)
_DIRECT = {o: DIRECT.labels(o) for o in ("decided", "deferred", "failed", "slow")}


def direct(outcome: str) -> None:
    """Count one live delivery whose rule set was compiled to be decided in the server."""
    try:
        _DIRECT[outcome].inc()
    except Exception:  # pragma: no cover
        pass


def grouped(size: int) -> None:
    """Record one evaluation frame of ``size`` deliveries."""
    try:
        GROUP_SIZE.observe(size)
    except Exception:  # pragma: no cover
        pass


#: The two series of every routed delivery, looked up once (``labels`` takes a lock).
_CUTS = {cut: ENVELOPE_BYTES.labels(cut) for cut in ("paths", "whole")}


def sent(size: int, cut: str) -> None:
    """Record one envelope sent for evaluation."""
    try:
        (_CUTS.get(cut) or ENVELOPE_BYTES.labels(cut)).observe(size)
    except Exception:  # pragma: no cover
        pass


def waited(seconds: float, acquired: bool) -> None:
    """Count one wait for an evaluation slot (never raises: a metric never fails routing)."""
    try:
        SLOT_WAITS.labels("acquired" if acquired else "busy").inc()
        SLOT_WAIT.observe(seconds)
    except Exception:  # pragma: no cover
        pass


def evaluated(seconds: float) -> None:
    """Record one evaluation's latency."""
    try:
        EVALUATION.observe(seconds)
    except Exception:  # pragma: no cover
        pass
