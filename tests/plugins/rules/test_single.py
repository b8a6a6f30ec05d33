"""single.py: rules proven to give one output need no ``break``; proven by running jq."""

from __future__ import annotations

import json
import random
from typing import Any

import jq
import pytest
from sbjqgen import gen_envelope
from switchboard_rules.sandbox_child import PRELUDE, build_program
from switchboard_rules.single import single_output

PARAMS = {"k": "a", "n": 1}


@pytest.mark.parametrize("expr", [
    '.kind == "push"', '.a.b["c"] == 1 and .x', '.payload.repository.full_name == "org/app"',
    '(.headers["x-github-event"] // "") != "ping"', ".a[0]", ".a[.b]", ".a[1:]", ".a[:2]",
    "[.a[]] | length > 0", "map(.x) | length", 'any(.labels[]; .name == "bug")',
    "all(.xs[]?; . > 1)", "if .a then .b elif .c then 1 else .d end", "if .a then 2 end",
    '"x\\(.a)y" | test("a")', "$params.k == .kind", "-.a + 1", ".a | not", "true", ". == 1",
    'error("x")', "error", ".a | length", '@base64 "\\(.q)"', "@json", "sort_by(.a) | first",
    '.a | ascii_downcase | startswith("x")', 'has("a")', '.a."b"', ".a.[0]",
    'getpath(["a","b"])', '.a // .b // "c"', 'tostring | split(",") | join("-")',
    "# a comment\n.kind",
])  # fmt: skip
def test_proven_one_output(expr: str) -> None:
    assert single_output(expr)


@pytest.mark.parametrize("expr", [
    ".a, .b", ".a?", ".a[]", ".[]", "..", "empty", "select(.a)", "first(.a[])", ".a // empty",
    "if .a then empty else 1 end", "limit(1; .a)", "(.a, .b) | not", "try .a",
    "try .a catch 1", ".a as $x | $x", "recurse", "range(2)", 'match("a")', 'capture("a")',
    'splits("a")', ".a[]?", "$__e", "$__s", "$__loc__", "input", "$ENV", "env", "paths",
    "reduce .a[] as $x (0; . + $x)", "def f: 1; f", "label $x | 1", "{a: 1}", '"\\(1,2)"',
    'test("a", "b")', ".a = 1", ".a |= 1", "values", ".a[.b[]]", "map(def f: 1; f)",
    "any(.a; def f: .; f)", "[.[] | def f: 1; f]", "", ".a | ", ".a?.b", "not(1)",
    "first(.a)", ".a | .b?", 'has("a", "b")', ".a[]|.b", "ltrimstr(.a, .b)", '"\\(.a?)"', "-",
    "1 +", 'getpath(["a"]; 1)', ".a ?// .b", "(" * 60 + ".a" + ")" * 60,
])  # fmt: skip
def test_not_proven(expr: str) -> None:
    assert not single_output(expr)


def test_hostile_nesting_gives_up_instead_of_overflowing() -> None:
    for expr in (
        "(" * 1300 + ".a" + ")" * 1300,
        ".a[" * 1000 + ".b" + "]" * 1000,
        '"\\(' * 680 + ".a" + ')"' * 680,
        "if " * 190 + ".a" + " then 1 else 2 end" * 190,
    ):
        assert len(expr) <= 4096 and not single_output(expr)
    assert single_output("(" * 40 + ".a" + ")" * 40)
    # an array's contents are skipped, not walked: any depth is one array, and no recursion
    assert single_output("[" * 1300 + ".a" + "]" * 1300)


# -- the claim itself: on generated rules, every proven one yields exactly one output or an
# error (and no other), and the sandbox's program gives it the same verdict either way ----

ONE = [
    ".a",
    ".kind",
    ".payload.x",
    '.["a"]',
    '."b"',
    ".a[0]",
    ".a[-1:]",
    ".x[.b]",
    "1",
    '"x"',
    "null",
    "true",
    "false",
    "$params.n",
    ".",
    "[.a[]?]",
    "length",
    "keys",
    "tostring",
    "type",
    "not",
    'error("boom")',
    "add",
    "first",
    "@json",
    "map(.)",
    "to_entries",
    "any(.[]?; . == 1)",
    "all(.[]?; . == 1)",
    "sort_by(.)",
]
MANY = [
    ".a?",
    ".a[]",
    ".[]?",
    "empty",
    "select(.a)",
    "(.a, .b)",
    "first(.a[]?)",
    "..",
    "limit(1; .a[]?)",
    "try .a",
    ".a // empty",
    "range(2)",
    '(1, error("late"))',
    "if .a then empty else 1 end",
    ".a as $x | $x",
    "{a: .b}",
    "values",
    "recurse",
    'splits("a")?',
    'match("a")?',
]
CALLS = [
    'test("a")',
    'startswith("x")',
    'has("a")',
    'contains("a")',
    'split("a")',
    'join(",")',
    'ltrimstr("a")',
    'index("a")',
    'getpath(["a"])',
    "ascii_downcase",
]
OPS = [" == ", " != ", " and ", " or ", " // ", " + ", " < ", " * ", " - "]


def gen_rule(r: random.Random, depth: int = 0) -> str:
    pick = r.random() if depth < 3 else r.random() * 0.45
    if pick < 0.33:
        return r.choice(ONE)
    if pick < 0.45:
        return r.choice(MANY)
    if pick < 0.60:
        return gen_rule(r, depth + 1) + r.choice(OPS) + gen_rule(r, depth + 1)
    if pick < 0.67:
        return f"({gen_rule(r, depth + 1)})"
    if pick < 0.77:
        return f"{gen_rule(r, depth + 1)} | {r.choice(CALLS + ONE + MANY)}"
    if pick < 0.83:
        return (
            f"if {gen_rule(r, depth + 1)} then {gen_rule(r, depth + 1)}"
            f" else {gen_rule(r, depth + 1)} end"
        )
    if pick < 0.87:
        return f"if {gen_rule(r, depth + 1)} then {gen_rule(r, depth + 1)} end"
    if pick < 0.92:
        return f'"<\\({gen_rule(r, depth + 1)})>"'
    if pick < 0.96:
        return f"{gen_rule(r, depth + 1)}[{gen_rule(r, depth + 1)}]"
    return f"[{gen_rule(r, depth + 1)}]"


def compiled(program: str) -> Any:
    try:
        return jq.compile(program, args={"params": PARAMS})
    except ValueError:
        return None


def outputs(program: Any, envelope: dict[str, Any]) -> list[Any]:
    """Every output of ``program`` on ``[0, envelope]``, or its error."""
    try:
        return list(program.input_value([0, envelope]))
    except ValueError as exc:
        return [f"error: {exc}"]


def test_proven_rules_give_one_output_and_the_same_verdict_without_break() -> None:
    r = random.Random(20261202)
    proven = refused = 0
    for _ in range(1500):
        expr = gen_rule(r)
        # the prelude only disarms forbidden builtins, which no generated rule calls
        exact = compiled(build_program([expr], [0], exact=True).replace(PRELUDE, "", 1))
        if exact is None:
            continue  # not jq (a type error at compile time, say)
        if not single_output(expr):
            refused += 1
            continue
        proven += 1
        count = compiled(f'.[1] | [limit(3; try (({expr}) | "one") catch "err")]')
        fast = compiled(build_program([expr], [0]).replace(PRELUDE, "", 1))
        for _ in range(3):
            env = gen_envelope(r)
            # one output, or an error before any: nothing else, and nothing after it
            assert outputs(count, env) in ([["one"]], [["err"]]), (expr, json.dumps(env))
            assert outputs(fast, env) == outputs(exact, env), (expr, json.dumps(env))
    # the generator must exercise both sides
    assert proven > 500, proven
    assert refused > 500, refused


def test_a_rule_set_mixes_both_wrappers_and_keeps_every_verdict() -> None:
    exprs = [
        ".a == 1",
        ".a[]? == 1",
        '.b | test("x")',
        "(.a, .b) | not",
        'error("e")',
        "empty",
        ".c",
    ]
    fast = compiled(build_program(exprs, list(range(len(exprs)))))
    exact = compiled(build_program(exprs, list(range(len(exprs))), exact=True))
    for env in ({"a": 1, "b": "x"}, {"a": [1, 2], "b": "y", "c": None}, {"a": "s", "b": 3}):
        assert outputs(fast, env) == outputs(exact, env)
    assert outputs(fast, {"a": 1, "b": "x"}) == [True, False, True, False, "ee", False, None]
