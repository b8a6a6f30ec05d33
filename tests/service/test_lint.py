"""Lint's pure parts: which params an expression reads, and the findings from counts."""

from __future__ import annotations

from collections import Counter

import pytest

from switchboard.routing.model import RoutingConfig
from switchboard.routing.verdicts import RuleVerdict, explained, match_of
from switchboard.service.lint import lint_findings, params_read


@pytest.mark.parametrize(
    ("exprs", "read"),
    [
        ([".a == $params.team"], {"team"}),
        (['.a == $params."odd key"', '$params["x"] == 1'], {"odd key", "x"}),
        (["$params | keys | length > 0"], None),  # reads them all
        (["$params[.k]"], None),
        ([".a", ".b == 1"], set()),
        (["$params.a and $params.b"], {"a", "b"}),
    ],
)
def test_params_read(exprs: list[str], read: set[str] | None) -> None:
    assert params_read(exprs) == read


def _config(n: int, params: dict[str, object] | None = None) -> RoutingConfig:
    return RoutingConfig(
        rules=tuple({"id": f"r{i}", "expr": ".x", "action": {"drop": True}} for i in range(n)),
        params=params or {},
    )


def test_findings_from_counts() -> None:
    config = _config(4, {"used": 1, "spare": 2})
    config.rules[0]["expr"] = "$params.used"
    shadows = [Counter(), Counter({0: 5}), Counter(), Counter()]
    found = lint_findings(
        config, 10, matched=[7, 5, 0, 0], faulted=[0, 0, 10, 3], won=[7, 0, 0, 0], shadows=shadows
    )
    assert [(f["rule_id"], f["kind"]) for f in found] == [
        ("r1", "shadowed"),
        ("r2", "only_faults"),
        ("r3", "never_matched"),
        (None, "unused_param"),
    ]
    assert found[0]["shadowed_by"] == "r0" and found[3]["param"] == "spare"
    assert "faulted on 3" in found[2]["detail"]
    assert (
        lint_findings(config, 0, [0] * 4, [0] * 4, [0] * 4, shadows)[0]["kind"] == "unused_param"
    )  # nothing evaluated: no rule finding, the params still read


def test_match_and_explain_follow_live_first_match() -> None:
    config = _config(4)
    err = RuleVerdict("error", "error", "boom")
    verdicts = [err, RuleVerdict("null"), RuleVerdict("matched"), RuleVerdict("error", "error")]
    match = match_of(config, verdicts)
    assert match.rule_index == 2 and [f.rule_id for f in match.faults] == ["r0"]
    assert [v["verdict"] for v in explained(config, verdicts)] == [
        "error",
        "null",
        "matched",
        "not_reached",
    ]
    budget = [
        RuleVerdict("false"),
        RuleVerdict("error", "budget_exhausted", "spent"),
        RuleVerdict("matched"),
        RuleVerdict("false"),
    ]
    spent = match_of(config, budget)  # a spent budget ends the evaluation: no match
    assert spent.rule_index is None and spent.faults[0].cause == "budget_exhausted"
