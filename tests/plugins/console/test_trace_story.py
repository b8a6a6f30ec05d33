"""The console's story of a trace: a pending event, and one the triage worker decided."""

from __future__ import annotations

from switchboard_console.charts import nice_ceiling
from switchboard_console.trace import decided_by, explain, waited


def test_a_pending_event_says_what_it_waits_for() -> None:
    story = explain({"stage": "pending", "pending": "llm"}, "pending")
    assert story == [
        "Waiting for the deferred llm stage: the producer got its 202, the triage worker"
        " decides it.",
        "Disposition: pending.",
    ]


def test_a_deferred_decision_says_when_it_was_made() -> None:
    trace = {
        "stage": "llm",
        "action": {"queue": "triage"},
        "llm": {"provider": "fake", "model": "m", "queue": "triage", "confidence": 0.9},
        "deferred": {"stage": "llm", "attempts": 2, "waited_ms": 8123},
    }
    story = explain(trace, "routed")
    assert (
        "Decided by the triage worker after the producer's 202 (llm: 8123 ms later, attempt 2)."
        in story
    )
    assert story[-1] == "Disposition: routed."


def test_the_deliveries_column_names_the_deciding_rule_or_the_fault_that_held_it() -> None:
    fault = {"rule_id": "boom", "rule_index": 0, "cause": "error"}
    rule = {"stage": "rule", "rule_id": "prs", "rule_index": 1, "faults": [fault]}
    assert decided_by(rule, "routed") == "rule #2 \u201cprs\u201d, after 1 fault"
    assert decided_by(rule, "held") == "held: a fault in rule #1 \u201cboom\u201d"
    assert decided_by({"stage": "default"}, "routed") == "default"
    assert decided_by({"stage": "pending", "pending": "llm"}, "pending") == "waiting for llm"
    assert decided_by(None, "routed") == "—"


def test_a_wait_reads_in_the_largest_units() -> None:
    assert [waited(s) for s in (0, 59, 60, 3599, 3600 + 5 * 60, 2 * 86400 + 4 * 3600)] == [
        "0 s",
        "59 s",
        "1 min",
        "59 min",
        "1 h 5 min",
        "2 d 4 h",
    ]
    assert waited(None) == "—"


def test_a_charts_scale_ends_at_a_round_number() -> None:
    assert [nice_ceiling(n) for n in (0, 1, 2, 3, 7, 10, 11, 26, 140)] == [
        1,
        1,
        2,
        5,
        10,
        10,
        20,
        50,
        200,
    ]
