"""Generated jq around the forbidden names: the scanner refuses, or the prelude stops, every call.

libjq itself is the oracle. A spy prelude (``def env: $__spy_env; ...``) turns a reference to a
forbidden builtin into a compile error naming it; libjq drops unreferenced defs before it checks
their bodies, so the error appears exactly when the expression, lexed and bound by libjq,
calls that builtin. ``$ENV`` is a variable, so it is caught by what it leaks instead: the
environment holds a marker that must never reach a verdict.
"""

from __future__ import annotations

import json
import os
import random
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import jq
import pytest
from switchboard_rules.jqscan import FORBIDDEN_FUNCTIONS, balanced, forbidden_names
from switchboard_rules.sandbox_child import build_program

#: Thousands of generated programs against libjq: part of the full run, not the fast subset.
pytestmark = pytest.mark.slow

SEED = 20250611
GRAMMAR_CASES = 4000
SOUP_CASES = 2500
MARKER = "swbfuzz7q"
ENVELOPE = {"nope": None, "a": 1, "e3": 5, "s": "x", "list": [1, 2]}

#: name/arity of every forbidden builtin this libjq defines
ARITIES = sorted(
    (b.rpartition("/")[0], int(b.rpartition("/")[2]))
    for b in jq.compile("builtins").input_value(None).first()
    if b.rpartition("/")[0] in FORBIDDEN_FUNCTIONS
)
SPY = " ".join(
    f"def {n}{'(' + '; '.join(f'a{k}' for k in range(a)) + ')' if a else ''}: $__spy_{n};"
    for n, a in ARITIES
)
_SPY_HIT = re.compile(r"\$__spy_([a-z_]+) is not defined")

TARGETS = [
    "env", "$ENV", "input", "inputs", "input_filename", "input_line_number", "debug",
    'debug("d")', "stderr", "halt", "halt_error", "halt_error(1)", "now", "localtime",
    '0|localtime', 'strflocaltime("%H")', "get_search_list", "get_jq_origin",
    "get_prog_origin", "modulemeta", "$ENV.SWB",
]  # fmt: skip
NUMBERS = [
    "0", "1", "7", "01", "1.", "1.5", ".5", "1e3", "1E3", "1e+2", "1e-2", "1E-1", "1.e3",
    ".5e1", "1.5E+1", "2e0", "00.5",
]  # fmt: skip
#: a number with a tail libjq does not take as an exponent: 1e- is 1, e, -
NUMBER_TAILS = ["e", "E", "e+", "e-", "E+", "E-", ".e", "e1e", "."]
GLUE_KEYWORDS = ["else", "elif", "end", "then", "and", "or", "as", "catch"]
GLUE_FRAMES = [
    "if .nope then NelseT end", "if .nope then 1 elif .a then NelseT end", "if NthenT end",
    "if . then NendT", "[NandT]", "[NorT]", "Nas $y|T", "try error(N)catchT", "{a: NorT}",
    "if .nope then NelifT then 1 end", "if .nope then Nelse T end", "[N, T]",
    "{a: if . then N,T, 2 end}", "{a: if .nope then 1 else N,T end}", "{a: if . then N,T}",
]  # fmt: skip
OPENERS = {" ": "", "-": "", "(": ")", "[": "]", '"\\(': ')"', "{a: ": "}", "- -": "", "-(": ")"}
STRINGS = ['"x"', '"e"', '"\\\\(env)"', '"\\"env"', '"#"', '"\\u0041"', '"env now"']
FORMATS = ["@base64", "@base64d", "@text", "@json", "@sh", "@html", "@uri"]
FIELDS = [".a", ".nope", ".e", ".e3", ".env", ".now", '."env"', '.["now"]', ".a?", ".[0]?", "."]
BENIGN = ["length", "not", "tostring", "type", "null", "true", "false", "empty", "keys", "tojson"]
KEYWORD_NAMES = ["then_x", "else_", "end1", "if_", "and_or", "env_", "_env", "nowx"]
OPERATORS = ["+", "-", "/", "%", "==", "!=", "<", "<=", ">", ">=", "and", "or", "//", "|", ","]
SEPARATORS = [
    ("", 30), (" ", 45), ("\n", 5), ("\t", 2), ("\r", 2), (" # c\n", 5), (" #\\\n", 3),
    ("#\r", 2), (" # \\\\\n", 2), (" #\\\r\n", 2),
]  # fmt: skip
SOUP_EXTRA = ["(", ")", "[", "]", "{", "}", ":", ";", ",", "|", "?", "?//", "..", "$", "$__loc__",
              "$x", "as", "if", "def", "reduce", "try", "-", "::", "a::env", "\\("]  # fmt: skip


class Gen:
    """Random jq, mostly well formed, serialised with glued tokens and comments."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.seps, self.weights = zip(*SEPARATORS, strict=True)

    def pick(self, items: list[str]) -> str:
        return self.rng.choice(items)

    def join(self, toks: list[str]) -> str:
        seps = self.rng.choices(self.seps, self.weights, k=len(toks))
        return "".join(t + s for t, s in zip(toks, seps, strict=True)).rstrip()

    def number(self) -> str:
        n = self.pick(NUMBERS)
        return n + self.pick(NUMBER_TAILS) if self.rng.random() < 0.15 else n

    def term(self, depth: int, scope: set[str]) -> list[str]:
        r = self.rng.random()
        if r < 0.3:
            return [self.pick(TARGETS)]
        if r < 0.4:
            return [self.number()]
        if r < 0.47:
            return [self.pick(STRINGS)]
        if r < 0.55:
            return [self.pick(FIELDS)]
        if r < 0.6:
            return [self.pick(BENIGN)]
        if r < 0.63 and scope:
            return [self.pick(sorted(scope))]
        if r < 0.66:
            return ["$__loc__"]
        if depth <= 0:
            return [self.pick(TARGETS)]
        inner = self.expr(depth - 1, scope)
        r = self.rng.random()
        if r < 0.12:
            return ["(", *inner, ")"]
        if r < 0.22:
            return ["[", *inner, "]"]
        if r < 0.34:
            return ['"a\\(', *inner, ')b"']
        if r < 0.4:
            return [self.pick(FORMATS), '"\\(', *inner, ')"']
        if r < 0.55:
            return self.obj(depth - 1, scope)
        if r < 0.7:
            out = ["if", *inner, "then", *self.expr(depth - 1, scope)]
            if self.rng.random() < 0.3:
                out += ["elif", *self.expr(depth - 1, scope), "then", *self.expr(depth - 1, scope)]
            if self.rng.random() < 0.7:
                out += ["else", *self.expr(depth - 1, scope)]
            return [*out, "end"]
        if r < 0.78:
            out = ["try", *self.term(depth - 1, scope)]
            return out + ["catch", *self.term(depth - 1, scope)] if self.rng.random() < 0.5 else out
        if r < 0.84:
            kw = self.pick(["reduce", "foreach"])
            body = self.expr(depth - 1, scope | {"$x"})
            tail = [";", "."] if kw == "foreach" else []
            return [kw, "(1,2)", "as", "$x", "(", "0", ";", *body, *tail, ")"]
        if r < 0.9:
            return ["-", *self.term(depth - 1, scope)]
        return [*self.term(depth - 1, scope), self.pick(["?", ".a", "[0]", "[]?", ".e3"])]

    def obj(self, depth: int, scope: set[str]) -> list[str]:
        out = ["{"]
        for k in range(self.rng.randint(1, 3)):
            if k:
                out.append(",")
            r = self.rng.random()
            if r < 0.25:  # shorthand: {env} is {"env": .env}, not a call
                out.append(self.pick(["env", "now", "if", "a", "$__loc__", '"s"']))
                continue
            key = self.pick(["a", "env", "if", "now", '"k"', "then", '@base64 "k"'])
            if r < 0.35:
                key_expr = self.expr(depth, scope)
                out += ["(", *key_expr, "|", "tostring", ")"]
            else:
                out.append(key)
            out.append(":")
            if self.rng.random() < 0.3:  # jq 1.7+: an if...end value may hold bare commas
                out += ["if", ".", "then", "1", ",", *self.term(depth, scope), ",",
                        *self.expr(depth, scope), "else", "1", "end"]  # fmt: skip
            else:
                out += self.term(depth, scope)
        return [*out, "}"]

    def expr(self, depth: int, scope: set[str]) -> list[str]:
        r = self.rng.random()
        left = self.term(depth, scope)
        if r < 0.45:
            return left
        if r < 0.75:
            return [*left, self.pick(OPERATORS), *self.expr(depth - 1, scope)]
        if r < 0.85:
            return [*left, "as", "$x", "|", *self.expr(depth - 1, scope | {"$x"})]
        if r < 0.9:
            return ["label", "$l", "|", *left, ",", "break", "$l"]
        name = self.pick(KEYWORD_NAMES + ["f", "env", "now"])  # a def may shadow a builtin
        body = ["1"] if name in TARGETS else left  # never recursive: def now: -now loops
        return ["def", name, ":", *body, ";", name, self.pick(OPERATORS), *left]

    def glued(self) -> str:
        # the shape of the reported bypass: a number glued to a keyword, then the target
        frame = self.pick(GLUE_FRAMES)
        opener = self.pick(list(OPENERS))
        call = opener + self.pick(TARGETS) + OPENERS[opener]
        return frame.replace("N", self.number()).replace("T", call)

    def soup(self) -> str:
        pool = TARGETS + NUMBERS + GLUE_KEYWORDS + STRINGS + FORMATS + FIELDS + OPERATORS
        toks = [self.pick(pool + SOUP_EXTRA) for _ in range(self.rng.randint(2, 8))]
        toks.insert(self.rng.randrange(len(toks) + 1), self.pick(TARGETS))
        return self.join(toks)

    def cases(self) -> Iterator[str]:
        for k in range(GRAMMAR_CASES):
            if k % 5 == 0:
                yield self.glued()
            else:
                yield self.join(self.expr(2, set()))
        for _ in range(SOUP_CASES):
            yield self.soup()


def spied(program: str) -> tuple[Any, set[str]]:
    """``program`` compiled beside the spy prelude (None if it fails), and the builtins it calls.

    When nothing is spied on, the spy defs are dropped and the program is ``program`` itself.
    """
    try:
        return jq.compile(f"{SPY} {program}"), set()
    except ValueError as exc:
        return None, set(_SPY_HIT.findall(str(exc)))


def compiles(expr: str) -> bool:
    try:
        jq.compile(expr)
    except ValueError:
        return False
    return True


def raw_outcome(expr: str) -> str:
    try:
        return json.dumps(jq.compile(expr).input_value(ENVELOPE).all())
    except ValueError as exc:
        return f"error: {exc}"


@dataclass
class Tally:
    """How many generated expressions reached each stage, and what went wrong."""

    generated: int = 0
    compiled: int = 0
    calling: int = 0
    refused: int = 0
    failures: list[str] = field(default_factory=list)


def leaked(outcome: str, started: float) -> bool:
    """True when an answer shows the environment's marker or the clock's time."""
    if MARKER in outcome:
        return True
    numbers = (float(n) for n in re.findall(r"\d{9,}(?:\.\d+)?", outcome))
    return any(abs(n - started) < 1e6 for n in numbers)


def check(expr: str, tally: Tally, started: float) -> None:
    fail = tally.failures.append
    spy, refs = spied(expr)
    if spy is None and not refs:  # a plain compile error, which libjq must give alone too
        if compiles(expr):
            fail(f"compiles alone but not beside the spy prelude: {expr!r}")
        return
    if refs and not compiles(expr):
        return  # libjq names every unbound spy, but another error would stop it compiling
    tally.compiled += 1
    scanned = {n.split("::")[-1] for n in forbidden_names(expr)}
    # with env itself quietened, only $ENV can put the marker in the answer
    reads_env = "$ENV" in expr and MARKER in raw_outcome(f"def env: {{}}; {expr}")
    if refs or reads_env:
        tally.calling += 1
    if scanned:
        tally.refused += 1
    if not refs <= scanned:
        fail(f"scanner misses {sorted(refs - scanned)}: {expr!r}")
    if reads_env and "$ENV" not in scanned:
        fail(f"scanner misses $ENV: {expr!r}")
    if not balanced(expr):
        return  # the sandbox refuses it before libjq sees it
    protected, escaped = spied(build_program([expr], [0]))
    if escaped:
        fail(f"the prelude leaves {sorted(escaped)} reachable: {expr!r}")
        return
    if protected is None:
        fail(f"compiles alone but not inside the rule wrapper: {expr!r}")
        return
    answers = list(protected.input_text(json.dumps([0, ENVELOPE])))  # halt would give none
    # a verdict (true, false, null) or an error message: nothing else leaves the wrapper
    answer = answers[0] if len(answers) == 1 else ...
    verdict = answer is True or answer is False or answer is None
    if not (verdict or isinstance(answer, str)) or (
        isinstance(answer, str) and leaked(answer, started)
    ):
        fail(f"protected rule answered {answers!r}: {expr!r}")


@pytest.fixture
def marked_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # what env and $ENV would leak: only the marker, so that even the short value libjq quotes
    # in an error message ("object ({...}) cannot be negated") shows it
    for key in list(os.environ):
        monkeypatch.delenv(key)
    monkeypatch.setenv("SWB", MARKER)


@pytest.mark.usefixtures("marked_environment")
def test_no_forbidden_builtin_runs() -> None:
    tally = Tally()
    started = time.time()
    seen: set[str] = set()
    for expr in Gen(random.Random(SEED)).cases():
        if expr in seen:
            continue
        seen.add(expr)
        tally.generated += 1
        check(expr, tally, started)
    assert not tally.failures, "\n".join(tally.failures[:20])
    # the generator must keep producing enough valid jq that calls a forbidden builtin
    assert tally.generated > 5000, tally
    assert tally.compiled > 1500, tally
    assert tally.calling > 1000, tally


@pytest.mark.usefixtures("marked_environment")
def test_oracles_see_what_they_must() -> None:
    # the spy finds calls the old scanner missed; the marker shows in an unprotected $ENV
    assert spied("if .nope then 1else-env end") == (None, {"env"})
    assert spied("def env: 1; env")[1] == set()
    assert spied("{env, a: .env}")[1] == set()
    assert spied("[1e-2, .e3, 1.e3]")[1] == set()
    assert spied("[1e-2, .e3, 1.e3]")[0].input_value(None).first() == [0.01, None, 1000]
    assert MARKER in raw_outcome("$ENV.SWB")
    assert MARKER not in raw_outcome("def env: {}; env")
    assert leaked(raw_outcome("now"), time.time())
    assert not leaked(raw_outcome("[1e3, 1796050611]"), 0.0)
