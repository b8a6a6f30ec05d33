"""jq errors in the rule author's terms: their rule, their line and column, never the wrapper."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sbtest import CLI, make_env
from sbusererrors import (
    ACTION_ERRORS,
    BRACKET_ERRORS,
    COMPILE_ERRORS,
    EXPR_ABSENT,
    EXPR_ERRORS,
    WRAPPER_NAMES,
)
from switchboard_rules import protocol as wire
from switchboard_rules.child.program import build_program, compile_program
from switchboard_rules.child.ruleset import RuleSet
from switchboard_rules.child.usererror import in_rule_terms


@pytest.mark.parametrize(("expr", "told"), COMPILE_ERRORS, ids=[e for e, _ in COMPILE_ERRORS])
def test_a_compile_error_is_told_at_the_rules_own_line_and_column(expr: str, told: str) -> None:
    with pytest.raises(ValueError) as raised:
        compile_program(build_program([expr], [0], sweep=True), {})
    assert in_rule_terms(str(raised.value), expr) == told


@pytest.mark.parametrize(("expr", "told"), BRACKET_ERRORS, ids=[e for e, _ in BRACKET_ERRORS])
def test_brackets_that_do_not_nest_are_told_at_the_bracket_at_fault(expr: str, told: str) -> None:
    cfg = wire.ChildConfig(
        memory_bytes=2**28, rule_ms=1000, compile_ms=5000, cache_size=4, parse_s_per_byte=0.0
    )
    assert RuleSet(["true", expr], {}, cfg).errors == {1: told}


def _check(tmp_path: Path, expr: object, action: Any = None) -> dict[str, Any]:
    mine = {"id": "mine", "name": "kind check", "expr": expr, "action": {"queue": "inbox"}}
    if expr is EXPR_ABSENT:
        del mine["expr"]
    if action is not None:
        mine["action"] = action
    rules = {"rules": [{"id": "fine", "expr": "true", "action": {"queue": "inbox"}}, mine]}
    path = tmp_path / "rules.json"
    path.write_text(json.dumps(rules))
    grant = tmp_path / "grant.json"
    grant.write_text(json.dumps({"target_queue": "inbox", "queues": ["inbox"]}))
    proc = (
        CLI(make_env(None, tmp_path / "data"))
        .fast()
        .run("rules", "check", str(path), "--grant", str(grant), check=False)
    )
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    error: dict[str, Any] = json.loads(proc.stderr.strip().splitlines()[-1])["error"]
    return error


@pytest.mark.parametrize(("expr", "told"), COMPILE_ERRORS, ids=[e for e, _ in COMPILE_ERRORS])
def test_rules_check_names_the_rule_and_its_own_position(
    tmp_path: Path, expr: str, told: str
) -> None:
    error = _check(tmp_path, expr)
    assert (error["code"], error["index"]) == ("invalid_expression", 1)
    prefix = "rule 1 (id mine, name kind check): expression does not compile: "
    assert error["message"] == prefix + told
    assert "$__" not in error["message"] and "catch" not in error["message"]


@pytest.mark.parametrize(("expr", "told"), BRACKET_ERRORS, ids=[e for e, _ in BRACKET_ERRORS])
def test_rules_check_points_at_the_bracket_at_fault(tmp_path: Path, expr: str, told: str) -> None:
    error = _check(tmp_path, expr)
    assert (error["code"], error["index"]) == ("invalid_expression", 1)
    assert (
        error["message"]
        == "rule 1 (id mine, name kind check): expression does not compile: " + told
    )


@pytest.mark.parametrize(("expr", "name"), WRAPPER_NAMES, ids=[e for e, _ in WRAPPER_NAMES])
def test_rules_check_refuses_the_wrappers_names(tmp_path: Path, expr: str, name: str) -> None:
    error = _check(tmp_path, expr)
    assert (error["code"], error["index"]) == ("invalid_expression", 1)
    assert error["message"].startswith(
        f"rule 1 (id mine, name kind check): expression does not compile: {name} is not defined"
    )


def test_jqs_own_loc_keeps_its_own_refusal(tmp_path: Path) -> None:
    # $__loc__ is jq's, not the wrapper's: it stays refused as forbidden, as before
    error = _check(tmp_path, "$__loc__.line == 1")
    assert error["code"] == "forbidden_function" and "$__loc__" in error["message"]


@pytest.mark.parametrize(("action", "told"), ACTION_ERRORS, ids=[t for _, t in ACTION_ERRORS])
def test_rules_check_names_the_actions_failing_field(
    tmp_path: Path, action: dict[str, Any], told: str
) -> None:
    error = _check(tmp_path, "true", action)
    assert (error["code"], error["index"]) == ("invalid_rule", 1)
    assert error["message"] == f"rule 1 (id mine, name kind check): {told}"


@pytest.mark.parametrize(("expr", "told"), EXPR_ERRORS, ids=[t for _, t in EXPR_ERRORS])
def test_rules_check_tells_a_missing_expr_from_a_wrong_or_empty_one(
    tmp_path: Path, expr: object, told: str
) -> None:
    error = _check(tmp_path, expr)
    assert (error["code"], error["index"]) == ("invalid_expression", 1)
    assert error["message"] == f"rule 1 (id mine, name kind check): {told}"


def test_rules_check_says_not_granted_for_a_typod_queue(tmp_path: Path) -> None:
    # The same code MCP gives for it (test_rule_errors): one code per cause on every surface
    error = _check(tmp_path, "true", {"queue": "inbx"})
    assert (error["code"], error["index"]) == ("not_granted", 1)
    assert "queue 'inbx' is not granted" in error["message"]
