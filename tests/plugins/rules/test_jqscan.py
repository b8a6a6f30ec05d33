"""Forbidden-function detection parses jq rather than grepping it."""

from __future__ import annotations

import itertools

import jq
import pytest
from switchboard_rules.jqscan import (
    BracketFault,
    balanced,
    bracket_fault,
    forbidden_names,
    scan,
    unterminated_string,
)
from switchboard_rules.jqtokens import tokenize

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
    "1e3 + 1E-2 + 1.e3 + .5e1 + 1. + 00.5",
    ".e3 + .e + .E",
    "def then_x: 1; def else_: 2; def if_: 3; then_x + else_ + if_",
    "def envy: 1; def nowhere: 2; envy + nowhere",
    "1 as $env | $env",
    "{if: 1, then: 2, end: 3, env: 4}",
    "{a: 1, env}",
    "{a: if . then 1 end, env}",
    "{a: if . then {env} end}",
    "{a: reduce (1, 2) as $x (0; .), env}",
    "{a: try 1, now}",
    ". as {env: $x, $y} | $x",
    ". as [$a] ?// {env: $a} | $a",
    '@base64d "x" | @text',
    '"\\\\(env)"',
    "1 #x\r env",
    "1 # \\\n env\n + 2",
    '"\\u0028env)"',
    "{a::env}",
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
    # a number's exponent needs digits: what follows an e that has none is code
    ("if .nope then 1else-env end", ["env"]),
    ("1else-now", ["now"]),
    ("1e-env", ["env"]),
    ("1E+now", ["now"]),
    ("1.else-input", ["input"]),
    (".5else-halt_error", ["halt_error"]),
    ("1e3else-get_search_list", ["get_search_list"]),
    ("1.env", ["env"]),
    ("[1and-input_filename]", ["input_filename"]),
    # jq 1.7+: an if...end object value holds bare commas, which are not key separators
    ("{a: if . then 1, env, 2 end}", ["env"]),
    ("{a: if . then 1 elif . then 2, now end}", ["now"]),
    ("{a: if . then {b: 1} else 1, inputs, 2 end}", ["inputs"]),
    ("{a: -if . then 1, stderr, 2 end}", ["stderr"]),
    # "$ name" is not a variable to libjq: the name is still a call
    ("$ env", ["env"]),
    ("1 #x\n env", ["env"]),
    ("1 # \\\\\n env", ["env"]),
    ('"\\(1else-env)"', ["env"]),
    ("@base64d::env", ["env"]),
    (".a::env", ["env"]),
    ("..env", ["env"]),
    ("{(env): 1}", ["env"]),
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


@pytest.mark.parametrize(
    ("expr", "fault"),
    [("(.a | [1, {b: 2}])", None), ("(", BracketFault(0, "(", unclosed=True)),
     ("(.a | {b: [1]", BracketFault(6, "{", unclosed=True)),
     ("[.a, (.b", BracketFault(5, "(", unclosed=True)), ("1)), ((2", BracketFault(1, ")")),
     ("[.a)", BracketFault(3, ")")), ('"(" + (', BracketFault(6, "(", unclosed=True)),
     ("# (\n)", BracketFault(4, ")"))],
)  # fmt: skip
def test_bracket_fault_is_the_bracket_at_fault(expr: str, fault: BracketFault | None) -> None:
    assert bracket_fault(expr) == fault


@pytest.mark.parametrize(
    ("expr", "at"),
    [('"x"', None), ('"', 0), ('.a | "x', 5), ('"abc\\', 0), ('"a\\"', 0), ('"\\(.a)', 0),
     ('"\\("x', 3), ('"\\("x")', 0), ('"\\("x")"', None), ('.a # "\n| "x', 9),
     ('# "\n.a', None), ('.a # \\\n"', None), ('"a" + "b', 6)],
)  # fmt: skip
def test_unterminated_string_is_where_the_open_string_starts(expr: str, at: int | None) -> None:
    assert unterminated_string(expr) == at


def test_deep_interpolation_is_linear() -> None:
    expr = '"\\(' * 40 + "1" + ')"' * 40
    assert forbidden_names(expr) == []


TOKENS = [
    ("1else-env", ["1", "else", "-", "env"]),
    ("1e-env", ["1", "e", "-", "env"]),
    ("1E+now", ["1", "E", "+", "now"]),
    (".5e", [".5", "e"]),
    ("1.e3", ["1.e3"]),
    ("1.e", ["1.", "e"]),
    ("1.5.3", ["1.5", ".3"]),
    ("1..2", ["1.", ".2"]),
    ("1e+2e3", ["1e+2", "e3"]),
    (".e3", [".e3"]),
    ("..env", ["..", "env"]),
    ("...a", ["..", ".a"]),
    ("then_x", ["then_x"]),
    ("if::x", ["if::x"]),
    ("a::b::c", ["a::b::c"]),
    ("a::1", ["a", ":", ":", "1"]),
    (".a::b", [".a", ":", ":", "b"]),
    ("@base64d::x", ["@base64d", ":", ":", "x"]),
    ("@1a", ["@1a"]),
    ("$__loc__", ["$__loc__"]),
    ("$a::b", ["$a::b"]),
    ("$ x", ["$", "x"]),
    ("?//=", ["?//", "="]),
    ("//=", ["//="]),
    ('"a\\(env)" 1', ['"', "1"]),
    ("1 #x\r 2\n3", ["1", "3"]),
    ("1 # \\\r\n 2\n3", ["1", "3"]),
    ("1 # \\\\\n 2", ["1", "2"]),
    ("1\f2", ["1", "\f", "2"]),
]


@pytest.mark.parametrize(("expr", "texts"), TOKENS)
def test_tokens_follow_libjq(expr: str, texts: list[str]) -> None:
    assert [t.text for t in tokenize(expr)] == texts


def _numberish() -> list[str]:
    alphabet = "1.eE+-"
    return [
        head + "".join(rest)
        for head in ("1", ".")
        for n in range(5)
        for rest in itertools.product(alphabet, repeat=n)
    ]


def test_number_lexing_matches_libjq() -> None:
    # libjq as the oracle: a string is one number token exactly when jq reads it as that number
    mismatches = []
    for text in _numberish():
        toks = tokenize(text)
        ours = len(toks) == 1 and toks[0].kind == "num"
        try:
            value = jq.compile(f"[{text}]").input_value(None).first()
            theirs = len(value) == 1 and value[0] == float(text)
        except ValueError:
            theirs = False
        if ours != theirs:
            mismatches.append(text)
    assert mismatches == []


def test_interpolations_nested_past_the_limit_are_refused_not_overflowed() -> None:
    from switchboard_rules.jqtokens import MAX_NESTING

    deep = '"\\(' * 680 + ".a" + ')"' * 680  # 3.4 KB: a rule may be this long
    assert forbidden_names(deep) == ["import"]  # refused as unanalysable, like the depth guard
    assert not balanced(deep)
    ok = '"\\(' * MAX_NESTING + ".a" + ')"' * MAX_NESTING
    assert forbidden_names(ok) == [] and balanced(ok)
