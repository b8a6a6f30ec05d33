"""reads.py: the envelope paths a rule reads, proven by comparing jq on both envelopes."""

from __future__ import annotations

import json
import random
from typing import Any

import jq
import pytest
from sbjqgen import KEYS, gen_envelope
from switchboard_rules.reads import cut, project, rule_reads, rule_set_reads, trie_of

PARAMS = {"k": "a", "n": 1}


def compiled(expr: str) -> Any:
    """``expr`` as the sandbox's wrapper runs it, every output as JSON (None: no compile)."""
    try:
        return jq.compile(
            f".[0] as $__s | .[1] as $__e | $__e | [limit(8; ({expr}) | tojson)]",
            args={"params": PARAMS},
        )
    except ValueError:
        return None


def run(program: Any, envelope: dict[str, Any]) -> list[str]:
    """Every output (as JSON) of ``program`` on ``envelope``, or its error."""
    try:
        return list(program.input_value([0, envelope]).first())
    except ValueError as exc:
        return [f"error: {exc}"]


@pytest.mark.parametrize(
    ("expr", "paths"),
    [
        ('.kind == "push"', {("kind",)}),
        ('.payload.repository.full_name == "org/app"', {("payload", "repository", "full_name")}),
        ('.headers["x-github-event"] // ""', {("headers", "x-github-event")}),
        ('.a."b".["c"]?', {("a", "b", "c")}),
        (".payload | keys | length > 3", {("payload",)}),
        (".a[.b]", {("a",), ("b",)}),
        (".a[1:.b]", {("a",), ("b",)}),
        (".a[0].c", {("a",)}),
        ('any(.payload.labels[]?; .name == "bug")', {("payload", "labels")}),
        ("all(.xs[]; . > 1)", {("xs",)}),
        ("if .a then .b elif .c then 1 else .d end", {("a",), ("b",), ("c",), ("d",)}),
        ('"\\(.x.y) z" | test("a")', {("x", "y")}),
        ('@base64 "\\(.q)"', {("q",)}),
        ("-.a + 1, [.b, .c] | length", {("a",), ("b",), ("c",)}),
        ("$params.k == .kind", {("kind",)}),
        ('.a | .b as $v | $v + "x"', {("a",)}),
        ('(.a | test("x")) and not', {("a",)}),
        ("true", set()),
        ("# comment\n.kind", {("kind",)}),
    ],
)
def test_paths_read(expr: str, paths: set[tuple[str, ...]]) -> None:
    assert rule_reads(expr) == frozenset(paths)


@pytest.mark.parametrize(
    "expr",
    [
        ".",  # the root itself
        "keys",
        "length",
        "tojson",
        "tostring",
        "to_entries",
        "paths",
        "@json",
        'has("kind")',
        "select(.a)",
        '.[] | select(. == "x")',
        "..",
        ".[.k]",
        '.["a" + "b"]',
        '."\\(.k)"',
        '.["\\(.k)"]',
        "{a}",
        "{a: .b}",
        ". as $x | $x.a",
        ".a as $x | 1",
        'getpath(["a"])',
        "if .a then 1 end",  # outputs the root when .a is false
        "reduce .a[] as $x (0; . + $x)",
        "def f: .a; f",
        ".a | def f: .; f",
        "$__e.kind",
        ".a | $__e",
        '.a | "\\($__e)"',
        "$__s",
        "$ENV",
        ".a | env",
        ".a | $ENV",
        "any(.[]; . == 1)",
        "any(. == 1)",
        "not(1)",
        ".a = 1",
        ".a |= 1",
        ".a ?// 1",
        "error",
        "label $out | .a",
        "try .a catch .",
        ".a)",
        "(.a",
        "",
    ],
)
def test_gives_up(expr: str) -> None:
    assert rule_reads(expr) is None


def test_rule_set_needs_every_rule_proven() -> None:
    assert rule_set_reads((".a", ".b.c")) == {("a",), ("b", "c")}
    assert rule_set_reads((".a", "keys")) is None
    assert rule_set_reads(()) == frozenset()


def test_project_keeps_whole_subtrees_and_shorter_paths_win() -> None:
    env = {
        "kind": "x",
        "payload": {"repository": {"full_name": "a", "id": 1}, "n": [1]},
        "headers": {"x-github-event": "push", "y": 2},
        "other": 1,
    }
    assert project(env, [("payload", "repository", "full_name"), ("headers", "nope")]) == {
        "payload": {"repository": {"full_name": "a"}},
        "headers": {},
    }
    assert project(env, [("payload",), ("payload", "n")]) == {"payload": env["payload"]}
    # a value on the way that is no object stays whole: indexing it fails as before
    assert project(env, [("kind", "z"), ("payload", "n", "m")]) == {
        "kind": "x",
        "payload": {"n": [1]},
    }
    assert project(env, [()]) == env
    assert env["payload"]["repository"] == {"full_name": "a", "id": 1}  # not modified


# -- the claim itself: for generated rules the analysis accepts, jq cannot tell the envelopes
# apart (every output and every error message is the same) --------------------------------


def gen_path(r: random.Random) -> str:
    out = ""
    for _ in range(r.randint(1, 3)):
        key = r.choice(KEYS)
        out += r.choice([f".{key}", f'.["{key}"]', f'."{key}"', f".{key}?"])
        if r.random() < 0.15:
            out += r.choice(["[0]", "[]?", "[1:]", "[-1:]", "[.b]?"])
    return out


ROOT_LEAKS = [
    ".",
    "keys",
    "length",
    "tojson",
    "tostring",
    "to_entries",
    'has("a")',
    "select(.a)",
    "[.[]?]",
    "[..]",
    "{a}",
    "{z: .b}",
    ". as $x | $x.a",
    "$__e",
    "[paths]",
    "type",
    "not",
    "@json",
    "[.[]?] | length",
    ".[$params.k]",
    "if .a then 1 end",
    'getpath(["a"])',
    '"\\(.)"',
    '[splits("a")?]',
    "add?",
    "any(.[]?; . == 1)",
    "del(.a)",
    ".a = 1",
    "with_entries(.)",
]
DERIVED = [
    ".",
    "length?",
    "keys?",
    "tostring",
    "type",
    ". == 1",
    'test("a")?',
    "map(.)?",
    ".[]?",
    "tojson",
    ".x?",
    "$params.k",
    "select(. != null)",
    '"\\(.)"',
    ". as $v | $v",
    "$__e.a",
    "[paths]?",
    "($__e | keys)",
    "reduce .[]? as $i (0; 1)",
    "to_entries?",
    "if . then 1 else 2 end",
    "$ENV.x?",
]
LITERALS = ["1", '"x"', "null", "true", "false", "$params.n", "[]", '"a\\u0041"']
OPS = [" == ", " != ", " and ", " or ", " // ", " + ", ", ", " < ", " * "]


def gen_root(r: random.Random, depth: int = 0) -> str:
    pick = r.random() if depth < 3 else r.random() * 0.45
    if pick < 0.30:
        return gen_path(r)
    if pick < 0.40:
        return r.choice(LITERALS)
    if pick < 0.45:
        return r.choice(ROOT_LEAKS)
    if pick < 0.60:
        return gen_root(r, depth + 1) + r.choice(OPS) + gen_root(r, depth + 1)
    if pick < 0.67:
        return f"({gen_root(r, depth + 1)})"
    if pick < 0.72:
        return f"[{gen_root(r, depth + 1)}]"
    if pick < 0.82:
        return f"{gen_root(r, depth + 1)} | {gen_derived(r, depth + 1)}"
    if pick < 0.87:
        return (
            f"if {gen_root(r, depth + 1)} then {gen_root(r, depth + 1)}"
            f" else {gen_root(r, depth + 1)} end"
        )
    if pick < 0.91:
        return f"{r.choice(['any', 'all'])}({gen_root(r, depth + 1)}; {gen_derived(r, depth)})"
    if pick < 0.95:
        return f'"<\\({gen_root(r, depth + 1)})>"'
    return f"{gen_path(r)}[{gen_root(r, depth + 1)}]?"


def gen_derived(r: random.Random, depth: int) -> str:
    if depth < 3 and r.random() < 0.25:
        return f"{r.choice(DERIVED)} | {gen_derived(r, depth + 1)}"
    return r.choice(DERIVED)


def test_a_trie_built_once_cuts_as_project_does() -> None:
    """The stage builds a rule set's trie once and cuts each delivery with it."""
    env = {"kind": "push", "headers": {"a": "1", "b": "2"}, "payload": {"n": {"m": 1}, "o": 2}}
    for paths in (
        [("payload", "n", "m"), ("headers", "a")],
        [("payload",), ("payload", "n")],
        [("kind", "z"), ("payload", "n", "m"), ("nope",)],
        [],
    ):
        trie = trie_of(paths)
        assert cut(env, trie) == project(env, paths)
        assert cut({"kind": "other"}, trie) == project({"kind": "other"}, paths)
    assert trie_of([("payload",), ()]) is None  # the empty path: the whole envelope
    assert cut(env, None) == env and cut(env, None) is not env


def test_jq_cannot_tell_a_projected_envelope_from_the_whole() -> None:
    r = random.Random(20261201)
    proven = compared = 0
    for _ in range(2500):
        expr = gen_root(r)
        paths = rule_reads(expr)
        program = compiled(expr)
        if paths is None or program is None:
            continue
        proven += 1
        for _ in range(3):
            env = gen_envelope(r)
            cut = project(env, paths)
            whole, seen = run(program, env), run(program, cut)
            assert whole == seen, (expr, json.dumps(env), json.dumps(cut))
            compared += 1
    # the generator must exercise both sides: enough accepted rules to mean something
    assert proven > 1500, proven
    assert compared == proven * 3


@pytest.mark.parametrize(
    "expr",
    [
        "(" * 1300 + ".a" + ")" * 1300,  # 2.6 KB: under the 4 KiB rule limit, jq compiles it
        "[" * 1300 + ".a" + "]" * 1300,
        ".a[" * 1000 + ".b" + "]" * 1000,
        "if " * 190 + ".a" + " then 1 else 2 end" * 190,
        '"\\(' * 680 + ".a" + ')"' * 680,  # interpolations: the lexer's own recursion
    ],
)
def test_hostile_nesting_gives_up_instead_of_overflowing(expr: str) -> None:
    assert len(expr) <= 4096
    assert rule_reads(expr) is None
    assert rule_reads("(" * 40 + ".a" + ")" * 40) == {("a",)}  # ordinary nesting is proven
