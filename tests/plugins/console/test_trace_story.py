"""The console's story of a trace: a pending event, and one the triage worker decided."""

from __future__ import annotations

from switchboard_console.trace import explain


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
