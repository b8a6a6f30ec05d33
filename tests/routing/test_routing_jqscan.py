"""Forbidden-function detection parses jq rather than grepping it."""

from __future__ import annotations

import pytest

from switchboard.routing.jqscan import balanced, forbidden_names, scan

ALLOWED = [
    ".payload.env",
    '.headers["x-input"]',
    'getpath(["now"])',
    '{"env": 1}',
    "{env: 1}",
    "{env}",
    "{if: 1, import: 2, input: 3}",
    ".env",
    '."now"',
    ".env?",
    '.["env"]',
    "mktime",
    'gmtime | strftime("%Y")',
    "todate",
    'splits("a")',
    'ltrimstr("x")',
    '"env now input"',
    '"\\\\(env)"',
    ".a # env\n | 1",
    ".a # \\\n env",
    ".a # \\\r\n env",
    "$params.x",
    ". as [$a] ?// $a | $a",
    "reduce range(3) as $i (0; . + $i)",
    "label $out | 1, break $out",
    '@base64 "x\\(.a)"',
    "1 as $x | {$x}",
    ".a.b as $now | $now",
    "builtins | length",
]

FORBIDDEN = [
    ("env", ["env"]),
    ("$ENV.HOME", ["$ENV"]),
    ("{$ENV}", ["$ENV"]),
    ("{a: env}", ["env"]),
    ("{(env | tostring): 1}", ["env"]),
    ("input", ["input"]),
    ("[inputs]", ["inputs"]),
    ("input_filename", ["input_filename"]),
    ("input_line_number", ["input_line_number"]),
    ('debug("x")', ["debug"]),
    ("debug", ["debug"]),
    ("stderr", ["stderr"]),
    ("halt", ["halt"]),
    ("halt_error(1)", ["halt_error"]),
    ("now | todate", ["now"]),
    ("localtime", ["localtime"]),
    ('0 | strflocaltime("%c")', ["strflocaltime"]),
    ("get_search_list", ["get_search_list"]),
    ("get_jq_origin", ["get_jq_origin"]),
    ("get_prog_origin", ["get_prog_origin"]),
    ("modulemeta", ["modulemeta"]),
    ('import "a" as $x {search: "$ORIGIN/.."}; 1', ["import"]),
    ('include "x"; 1', ["include"]),
    ("$__loc__", ["$__loc__"]),
    ("{$__loc__}", ["$__loc__"]),
    ('"a\\(env)b"', ["env"]),
    ('"a\\("x\\(now)")"', ["now"]),
    ('@base64 "\\(input)"', ["input"]),
    ("def now: 1; now", ["now"]),
    ("limit(1; input_filename)", ["input_filename"]),
    ("a::env", ["a::env"]),
    (".a # \\\n x\nenv", ["env"]),
    ("env, now, env", ["env", "now"]),
    (".x as $ENV | 1", ["$ENV"]),
]


@pytest.mark.parametrize("expr", ALLOWED)
def test_allowed(expr: str) -> None:
    assert forbidden_names(expr) == []


@pytest.mark.parametrize(("expr", "names"), FORBIDDEN)
def test_forbidden(expr: str, names: list[str]) -> None:
    assert forbidden_names(expr) == names


def test_scan_reports_calls_and_variables() -> None:
    found = scan('.a | select(.b == $params.x) | test("y")')
    assert {"select", "test"} <= found.calls
    assert found.variables == {"$params"}


def test_def_params_are_not_calls() -> None:
    assert "g" not in scan("def f(g; $x): $x; f(1; 2)").calls


@pytest.mark.parametrize(
    ("expr", "ok"),
    [("(.a | [1, {b: 2}])", True), ('")"', True), ("1)), ((2", False), ("[", False),
     ("# )\n1", True), ('"\\(")")"', True)],
)  # fmt: skip
def test_balanced(expr: str, ok: bool) -> None:
    assert balanced(expr) is ok


def test_deep_interpolation_is_linear() -> None:
    expr = '"\\(' * 40 + "1" + ')"' * 40
    assert forbidden_names(expr) == []
