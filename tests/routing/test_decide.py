"""decide(): first match, narrowing, no fall-through, defaults, drops, and valid traces."""

from __future__ import annotations

from typing import Any

import pytest

from switchboard.routing.decide import decide, default_decision
from switchboard.routing.model import Fault, Grant, MatchResult, RoutingConfig
from switchboard.routing.trace import validate_trace

ALL = ("ep-owner", "ep-a", "ep-b")


def config(*actions: dict[str, Any], default: dict[str, Any] | None = None) -> RoutingConfig:
    rules = [{"id": f"r{i}", "name": f"rule {i}", "expr": "true", "action": a}
             for i, a in enumerate(actions)]  # fmt: skip
    return RoutingConfig(rules=tuple(rules), default_action=default)


CASES: list[tuple[str, RoutingConfig, int | None, tuple[bool, str | None, tuple[str, ...]], dict[str, Any]]] = [
    ("queue to all", config({"queue": "forge"}), 0, (False, "forge", ALL),
     {"stage": "rule", "rule_index": 0, "rule_id": "r0", "rule_name": "rule 0"}),
    ("narrowed in target order", config({"queue": "forge", "endpoints": ["ep-b", "ep-owner"]}), 0,
     (False, "forge", ("ep-owner", "ep-b")), {"stage": "rule"}),
    ("partly revoked endpoints", config({"queue": "forge", "endpoints": ["ep-gone", "ep-a"]}), 0,
     (False, "forge", ("ep-a",)), {"stage": "rule"}),
    ("target queue", config({"queue": "inbox"}), 0, (False, "inbox", ALL), {"stage": "rule"}),
    ("drop rule", config({"drop": True}), 0, (True, None, ()), {"stage": "rule", "action": {"drop": True}}),
    ("second rule", config({"queue": "forge"}, {"queue": "lane-s"}), 1, (False, "lane-s", ALL),
     {"rule_index": 1}),
    ("no match", config({"queue": "forge"}), None, (False, "inbox", ALL),
     {"stage": "default", "cause": "no_match_default", "action": {"queue": "inbox"}}),
    ("no match default", config({"queue": "forge"}, default={"queue": "lane-s", "endpoints": ["ep-a"]}),
     None, (False, "lane-s", ("ep-a",)), {"cause": "no_match_default"}),
    ("no match drop default", config(default={"drop": True}), None, (True, None, ()),
     {"stage": "default", "action": {"drop": True}}),
    ("default unreachable", config(default={"queue": "revoked"}), None, (False, "inbox", ALL),
     {"cause": "default_not_granted", "action": {"queue": "inbox"}}),
    ("default endpoints gone", config(default={"queue": "forge", "endpoints": ["ep-gone"]}), None,
     (False, "inbox", ALL), {"cause": "default_not_granted"}),
    ("rule queue revoked, no fall-through", config({"queue": "revoked"}, {"queue": "forge"}), 0,
     (False, "inbox", ALL), {"stage": "default", "cause": "rule_not_granted", "rule_index": 0,
                             "rule_id": "r0"}),
    ("rule endpoints revoked", config({"queue": "forge", "endpoints": ["ep-gone"]}, default={"drop": True}),
     0, (True, None, ()), {"cause": "rule_not_granted", "action": {"drop": True}}),
    ("rule revoked to default", config({"queue": "revoked"}, default={"queue": "forge"}), 0,
     (False, "forge", ALL), {"cause": "rule_not_granted", "action": {"queue": "forge"}}),
]  # fmt: skip


@pytest.mark.parametrize(
    ("label", "cfg", "index", "expected", "trace"), CASES, ids=[c[0] for c in CASES]
)
def test_decide(label: str, cfg: RoutingConfig, index: int | None,
                expected: tuple[bool, str | None, tuple[str, ...]], trace: dict[str, Any],
                grant: Grant) -> None:  # fmt: skip
    d = decide(cfg, MatchResult(index), grant)
    assert (d.drop, d.queue, d.endpoints) == expected
    for key, value in trace.items():
        assert d.trace[key] == value
    assert "faults" not in d.trace
    if d.trace["stage"] == "rule":
        assert "cause" not in d.trace
    validate_trace(d.trace)


def test_faults_are_carried(grant: Grant) -> None:
    faults = (Fault(0, "timeout", "r0", "slow"), Fault(-1, "sandbox_failure", detail="boom"))
    d = decide(config({"queue": "forge"}), MatchResult(None, faults), grant)
    assert d.trace["faults"] == [
        {"rule_index": 0, "cause": "timeout", "rule_id": "r0", "detail": "slow"},
        {"rule_index": -1, "cause": "sandbox_failure", "detail": "boom"},
    ]
    validate_trace(d.trace)
    d = decide(config({"queue": "forge"}, {"drop": True}), MatchResult(1, faults[:1]), grant)
    assert d.drop and d.trace["faults"][0]["cause"] == "timeout"
    validate_trace(d.trace)


def test_default_decision_helper(grant: Grant) -> None:
    d = default_decision(grant)
    assert (d.drop, d.queue, d.endpoints) == (False, "inbox", ALL)
    d = default_decision(grant, {"queue": "forge"}, [Fault(-1, "sandbox_busy")])
    assert d.queue == "forge" and d.trace["faults"] == [{"rule_index": -1, "cause": "sandbox_busy"}]
    validate_trace(d.trace)


def test_out_of_range_index_takes_default(grant: Grant) -> None:
    assert (
        decide(config({"queue": "forge"}), MatchResult(7), grant).trace["cause"]
        == "no_match_default"
    )


@pytest.mark.parametrize(
    "doc",
    [
        # open to any stage's name and key (checked against the stage: test_stagecall.py),
        # but a name is a name
        {"stage": "Bogus Stage!", "action": {"queue": "q"}},
        {"stage": "rule"},
        {"stage": "rule", "action": {"drop": False}},
        {"stage": "rule", "action": {"queue": "q"}, "extra-key": 1},
        {"stage": "default", "action": {"queue": "q"}, "faults": [{"stage": "x", "cause": "oops"}]},
        {"stage": "default", "cause": "why", "action": {"queue": "q"}},
        {
            "stage": "rule",
            "action": {"queue": "q"},
            "faults": [{"rule_index": -2, "cause": "timeout"}],
        },
        {"stage": "rule", "action": {"queue": "q"}, "faults": [{"rule_index": 0, "cause": "oops"}]},
        {"stage": "rule", "rule_index": -1, "action": {"queue": "q"}},
    ],
)
def test_invalid_traces(doc: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="invalid routing trace"):
        validate_trace(doc)


def test_llm_trace_is_allowed() -> None:
    validate_trace({"stage": "llm", "action": {"queue": "q", "endpoints": ["e"]},
                    "llm": {"queue": "q", "confidence": 0.9, "reason": "r", "model": "m"}})  # fmt: skip


def test_llm_fallback_traces_and_their_causes() -> None:
    from switchboard.plugin import LLM_CAUSES
    from switchboard.resources import load_schema

    listed = load_schema("trace")["properties"]["cause"]["enum"]
    assert [c for c in listed if c.startswith("llm_")] == list(LLM_CAUSES)
    for cause in LLM_CAUSES:
        validate_trace(
            {
                "stage": "default",
                "cause": cause,
                "action": {"queue": "inbox"},
                "llm": {
                    "provider": "p",
                    "model": "m",
                    "latency_ms": 12,
                    "detail": "why",
                    "answer": "{",
                },
            }
        )
    validate_trace(
        {
            "stage": "llm",
            "action": {"queue": "q"},
            "llm": {
                "provider": "p",
                "model": "m",
                "queue": "q",
                "confidence": 1,
                "reason": "r",
                "latency_ms": 0,
            },
        }
    )
    for bad in (
        {"stage": "llm", "action": {"queue": "q"}},  # no llm object
        {"stage": "llm", "action": {"queue": "q"}, "llm": {"provider": "p"}},  # no answer
        {"stage": "default", "cause": "llm_timeout", "action": {"queue": "q"}},
        {
            "stage": "default",
            "cause": "llm_error",
            "action": {"queue": "q"},
            "llm": {"provider": "p", "secret": "x"},
        },
        {
            "stage": "default",
            "cause": "llm_error",
            "action": {"queue": "q"},
            "llm": {"latency_ms": -1},
        },
    ):
        with pytest.raises(ValueError, match="invalid routing trace"):
            validate_trace(bad)
