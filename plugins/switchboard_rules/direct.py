"""Rules simple enough to decide in the server: jq's answer exactly, or none (the sandbox's).

Most routing rules compare a few envelope fields with literals:
``.kind == "pull_request" and .payload.repository.full_name == "org/repo"``. Such a rule
has no loop, no generator and no function but a few of constant cost (a string is copied
or searched here only up to :data:`SCAN_MAX` characters), so evaluating it costs a few
dictionary lookups, bounded by its 4 KiB of text, and nothing it reads can make it run
longer or reach anything: it needs no process of its own. Sending it to the sandbox costs
a round trip to another process and two turns of the worker's loop (bench/README.md,
issue 38). History's dry runs judge stored events here too (``stage.RulesStage.verdicts``).

The subset (anything else is not compiled here, and the rule set goes to the sandbox):
paths from ``.`` of fields (``.name``, ``."name"``, ``["name"]``) and integer indexes
(``[0]``, ``[-1]``); string literals without interpolation, integer literals up to 2^53
(optionally negative), ``true``, ``false``, ``null``; ``==``, ``!=``, ``<``, ``<=``,
``>``, ``>=``; ``and``, ``or``, ``//``; pipes (``a | b``); ``not``, ``length``, ``type``,
``ascii_downcase``, ``ascii_upcase``, and ``startswith``/``endswith``/``has``/``contains``
of a string literal (``.payload.ref | startswith("refs/heads/")``,
``.payload | has("issue")``); ``test`` of a regex literal of the subset every engine reads
alike (jqregex.py: matched by RE2, in linear time); parentheses.

Evaluation answers only where the result is certain to be jq's: it raises :class:`Defer`
where jq would raise an error (a field of a string, say), and where the values compared
are outside what is proven here to compare alike (a non-integer number, an integer past
2^53, an array, an object), and the caller sends the delivery to the sandbox as before,
so its trace, faults and verdict are jq's own. ``tests/plugins/rules/test_direct.py``
compares this module with libjq on every expression shape and value kind.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

from .jqfilters import FILTERS, OF_A_STRING, SAFE, SCAN_MAX, Defer, Evaluate, truthy
from .jqregex import jq_test
from .jqtokens import Token, tokenize

__all__ = ["MAX_NESTING", "MAX_TOKENS", "SCAN_MAX", "Defer", "Evaluate", "compile_expr",
           "compile_rules", "first_match"]  # fmt: skip

#: The most tokens of one rule set decided here: whatever a tenant writes, its rules cost
#: the worker ~0.1 ms a delivery at most (1,024 tokens of comparisons, measured; the
#: sandbox's round trip costs the worker more; regexes, a few µs each, are bounded by
#: ``stage.DIRECT_CPU_MAX_S``); a larger rule set goes to the sandbox, where its time is
#: charged to its owner. The bench's 32 rules are 640 tokens.
MAX_TOKENS = 1024
#: Parentheses nested deeper than this are left to the sandbox (each is a Python call).
MAX_NESTING = 32
_SURROGATE = re.compile("[\ud800-\udfff]")
log = logging.getLogger("switchboard.rules")
#: Operators: a comparison is not associative in jq (``a == b == c`` does not parse).
_COMPARE = frozenset({"==", "!=", "<", "<=", ">", ">="})
#: Filters of one string literal: a maker answers None for a literal outside the subset.
_OF_A_STRING: dict[str, Callable[[str], Evaluate | None]] = {**OF_A_STRING, "test": jq_test}


class _Unsupported(Exception):
    """The expression is outside the subset."""


def compile_rules(exprs: Sequence[str]) -> tuple[Evaluate, ...] | None:
    """Every expression compiled, or None when any is outside the subset or the rule set
    has more than :data:`MAX_TOKENS` tokens."""
    compiled = []
    budget = MAX_TOKENS
    for expr in exprs:
        one = compile_expr(expr, budget)
        if one is None:
            return None
        fn, used = one
        budget -= used
        compiled.append(fn)
    return tuple(compiled)


def compile_expr(expr: str, budget: int = MAX_TOKENS) -> tuple[Evaluate, int] | None:
    """``expr`` as a function of the envelope and its token count, or None when it is
    outside the subset or has more than ``budget`` tokens."""
    try:
        tokens = tokenize(expr)
    except Exception:  # the sandbox's compiler names what is wrong with it
        return None
    if len(tokens) > budget:
        return None
    parser = _Parser(tokens)
    try:
        fn = parser.pipe()
        if parser.pos != len(tokens):
            return None
    except (_Unsupported, IndexError, RecursionError):
        return None
    except Exception:  # a bug of ours: the sandbox's compiler and jq still answer for it
        log.exception("compiling a rule to decide it in the server raised: the sandbox will")
        return None
    return fn, len(tokens)


def first_match(compiled: Sequence[Evaluate], envelope: Any) -> int | None:
    """The index of the first rule whose output is neither null nor false (None: no match);
    :class:`Defer` when any rule evaluated on the way has no certain answer here."""
    for index, fn in enumerate(compiled):
        if truthy(fn(envelope)):
            return index
    return None


def _rank(value: Any) -> int:
    """jq's order of kinds (null, false, true, number, string), for the values proven here."""
    if value is None:
        return 0
    if value is False:
        return 1
    if value is True:
        return 2
    if type(value) is int and -SAFE <= value <= SAFE:
        return 3
    if type(value) is str:
        return 4
    raise Defer  # a float (its literal may differ from its double), an array, an object


def _compare(op: str, left: Any, right: Any) -> bool:
    a, b = _rank(left), _rank(right)
    if a != b or a < 3:
        # different kinds order by kind; null, false and true are each one value
        key_l, key_r = (a, 0), (b, 0)
    else:
        # numbers by value; strings by code point, which is UTF-8's byte order (jq's)
        key_l, key_r = (a, left), (b, right)
    if op == "==":
        return key_l == key_r
    if op == "!=":
        return key_l != key_r
    if op == "<":
        return key_l < key_r
    if op == "<=":
        return key_l <= key_r
    if op == ">":
        return key_l > key_r
    return key_l >= key_r


def _path(steps: tuple[str | int, ...]) -> Evaluate:
    """A path of field names (str) and array indexes (int)."""

    def get(value: Any) -> Any:
        for step in steps:
            if value is None:
                return None  # jq: a field or an index of null is null
            if isinstance(step, str):
                if not isinstance(value, dict):
                    raise Defer  # jq: "Cannot index <kind> with ...", the sandbox's to say
                # dict's own lookup: what the envelope's JSON encoder writes, whatever a
                # projection's subclass of dict may do with get()
                value = dict.get(value, step)
            else:
                if type(value) is not list:
                    raise Defer
                # jq: a negative index counts from the end; outside the array is null
                at = step + len(value) if step < 0 else step
                value = value[at] if 0 <= at < len(value) else None
        return value

    return get


def _constant(value: Any) -> Evaluate:
    return lambda _: value


class _Parser:
    """A recursive descent over the subset's tokens (jq's precedence: ``|`` below ``or``
    below ``and`` below the comparisons)."""

    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.pos = 0
        self.depth = 0
        #: the literals' functions, and their values
        self.constants: dict[Evaluate, Any] = {}

    def _peek(self) -> Token | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def _is(self, kind: str, text: str) -> bool:
        tok = self._peek()
        return tok is not None and tok.kind == kind and tok.text == text

    def _take(self) -> Token:
        tok = self.tokens[self.pos]
        self.pos += 1
        return tok

    def pipe(self) -> Evaluate:
        # ``a | b | c``: each part has exactly one output here (no generator), so the pipe
        # is their composition, kept flat (a 4 KiB pipe is ~1,000 parts)
        parts = self._chain(self._alternative, "punct", "|")
        return parts[0] if len(parts) == 1 else _compose(tuple(parts))

    def _chain(self, part: Callable[[], Evaluate], kind: str, text: str) -> list[Evaluate]:
        """``part (text part)*``: a chain's operands, kept flat (a 4 KiB chain is ~500)."""
        parts = [part()]
        while self._is(kind, text):
            self._take()
            parts.append(part())
        return parts

    def _alternative(self) -> Evaluate:
        # below ``or``: ``a or b // c`` is ``(a or b) // c``; right-associative, which for
        # one output each is the first that is neither null nor false, else the last
        parts = self._chain(self._or, "punct", "//")
        return parts[0] if len(parts) == 1 else _first_true(tuple(parts))

    def _or(self) -> Evaluate:
        parts = self._chain(self._and, "ident", "or")
        return parts[0] if len(parts) == 1 else _any(tuple(parts))

    def _and(self) -> Evaluate:
        parts = self._chain(self._comparison, "ident", "and")
        return parts[0] if len(parts) == 1 else _all(tuple(parts))

    def _comparison(self) -> Evaluate:
        left = self._term()
        tok = self._peek()
        if tok is None or tok.kind != "punct" or tok.text not in _COMPARE:
            return left
        self._take()
        right = self._term()
        op = tok.text
        if op in ("==", "!=") and (left in self.constants or right in self.constants):
            # the common rule: a field equal to a literal, without the general ordering
            path, lit = (right, left) if left in self.constants else (left, right)
            return _equals(path, self.constants[lit], op == "!=")
        return lambda v: _compare(op, left(v), right(v))

    def _term(self) -> Evaluate:
        tok = self._take()
        if tok.kind == "punct" and tok.text == "(":
            self.depth += 1
            if self.depth > MAX_NESTING:
                raise _Unsupported
            fn = self.pipe()
            if not self._is("punct", ")"):
                raise _Unsupported
            self._take()
            self.depth -= 1
            return fn
        if (tok.kind == "punct" and tok.text == ".") or tok.kind == "field":
            self.pos -= 1
            return _path(self._steps())
        if tok.kind == "str":
            return self._constant(self._string(tok))
        if tok.kind == "num" or (tok.kind == "punct" and tok.text == "-"):
            self.pos -= 1
            return self._constant(self._integer())
        if tok.kind == "ident" and tok.text in ("true", "false", "null"):
            return self._constant({"true": True, "false": False, "null": None}[tok.text])
        if tok.kind == "ident" and tok.text in FILTERS and not self._is("punct", "("):
            return FILTERS[tok.text]
        if tok.kind == "ident" and tok.text in _OF_A_STRING and self._is("punct", "("):
            self._take()
            arg = self._take()
            if arg.kind != "str" or not self._is("punct", ")"):
                raise _Unsupported  # only a literal: an argument is evaluated on the input
            self._take()
            made = _OF_A_STRING[tok.text](self._string(arg))
            if made is None:
                raise _Unsupported  # a regex outside the subset (jqregex.py)
            return made
        raise _Unsupported

    def _constant(self, value: Any) -> Evaluate:
        fn = _constant(value)
        self.constants[fn] = value
        return fn

    def _steps(self) -> tuple[str | int, ...]:
        """A path's steps: ``.``, then fields and ``[...]`` indexes of literals."""
        steps: list[str | int] = []
        first = True
        while (tok := self._peek()) is not None:
            if tok.kind == "field":
                steps.append(self._take().text[1:])
            elif tok.kind == "punct" and tok.text == ".":
                self._take()
                nxt = self._peek()
                if nxt is not None and nxt.kind == "str":  # ."name"
                    steps.append(self._string(self._take()))
                elif not first:
                    raise _Unsupported
            elif tok.kind == "punct" and tok.text == "[":
                self._take()
                nxt = self._peek()
                if nxt is not None and nxt.kind == "str":
                    steps.append(self._string(self._take()))
                else:
                    steps.append(self._integer())
                if not self._is("punct", "]"):
                    raise _Unsupported
                self._take()
            else:
                break
            first = False
        return tuple(steps)

    def _string(self, tok: Token) -> str:
        """A string literal's text (no interpolation: that is code)."""
        if tok.parts:
            raise _Unsupported
        try:
            text = json.loads(tok.raw)
        except ValueError:
            raise _Unsupported from None
        if not isinstance(text, str) or _SURROGATE.search(text):
            # jq reads a lone surrogate's escape as U+FFFD, where Python keeps it
            raise _Unsupported
        return text

    def _integer(self) -> int:
        """An integer literal, optionally negative, that a double holds exactly."""
        tok = self._take()
        sign = 1
        if tok.kind == "punct" and tok.text == "-":
            sign, tok = -1, self._take()
        if tok.kind != "num" or not tok.text.isdigit() or int(tok.text) > SAFE:
            raise _Unsupported
        return sign * int(tok.text)


#: The kinds of value whose equality with a literal of another kind is certain (false).
_KNOWN = frozenset({type(None), bool, int, float, str, list, dict})


def _equals(fn: Evaluate, literal: Any, negate: bool) -> Evaluate:
    """``fn == literal`` (``!=`` when ``negate``): a value of the literal's kind compares
    by value; of another kind, it is unequal; a float against an integer, or an integer
    past 2^53, is :class:`Defer` (jq compares their literal texts)."""
    kind = type(literal)

    def equals(v: Any) -> bool:
        value = fn(v)
        vkind = type(value)
        if vkind is kind:
            if kind is int and not -SAFE <= value <= SAFE:
                raise Defer
            return (value == literal) is not negate
        if vkind not in _KNOWN or (kind is int and vkind is float):
            raise Defer
        return negate  # another kind of value: never equal

    return equals


def _compose(parts: tuple[Evaluate, ...]) -> Evaluate:
    def piped(v: Any) -> Any:
        for part in parts:
            v = part(v)
        return v

    return piped


def _all(parts: tuple[Evaluate, ...]) -> Evaluate:
    # jq evaluates ``a and b`` left first, and b only when a is true
    def every(v: Any) -> bool:
        for part in parts:
            if not truthy(part(v)):
                return False
        return True

    return every


def _any(parts: tuple[Evaluate, ...]) -> Evaluate:
    def some(v: Any) -> bool:
        for part in parts:
            if truthy(part(v)):
                return True
        return False

    return some


def _first_true(parts: tuple[Evaluate, ...]) -> Evaluate:
    # jq: ``a // b`` is a's output unless it is null or false (a's error is not suppressed)
    *heads, last = parts

    def alternative(v: Any) -> Any:
        for part in heads:
            value = part(v)
            if truthy(value):
                return value
        return last(v)

    return alternative
