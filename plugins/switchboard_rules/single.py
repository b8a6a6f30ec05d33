"""Which rules provably give one output, or fail before giving any: they need no ``break``.

The evaluator's program takes each rule's *first* output (``label``/``break``: what
``first`` does), so that a rule yielding many values, or erring after its first, still has
one verdict. That wrapper is the largest part of jq's time for typical rules (for 32
comparisons like ``.kind == "x" and .payload.a == "y"`` about 40 % of it). A rule whose
expression yields exactly one output, or raises before yielding anything, has the same
first output without it, and does no work after it; such rules get the cheaper wrapper
(``sandbox_child.build_program``), every other rule keeps the exact one.

What is proven one-output: paths of string keys and indexes (``.a.b``, ``.["a"]``,
``.a[0]``, ``.a[.b]``, slices), literals, variables, ``(...)``, unary minus, the binary
operators (``==`` ... ``%``, ``and``, ``or``, ``//``) and pipes over one-output operands,
``if`` (with or without ``else``), strings whose interpolations are one-output, array
construction ``[...]`` (whatever is inside: it is all done before the one output), the
builtins listed below, and the builtins that collect their closure arguments (``map``,
``any``, ``all``, ``sort_by``, ...). Anything else gives up (False): ``,``, ``?``, ``.[]``,
``..``, ``empty``, ``select``, ``first(f)``, ``limit``, ``try``, object construction,
every binding and definition form, the wrapper's own ``$__*`` names. The tests run generated
rules through jq both ways and compare every verdict, and check that each proven rule
yields exactly one output or an error.
"""

from __future__ import annotations

from functools import lru_cache

from .jqscan import FORBIDDEN_VARIABLES, MAX_DEPTH, Cursor, Unproven
from .jqtokens import Token, TooDeep, tokenize

_BINARY = frozenset({"//", "==", "!=", "<", "<=", ">", ">=", "+", "-", "*", "/", "%"})
#: One output for any input, or an error and none (libjq 1.7/1.8's C functions and
#: builtin.jq definitions: reductions, ``.[0]``, ``.[-1]`` and collections).
_NULLARY = frozenset({
    "true", "false", "null", "not", "length", "utf8bytelength", "type", "tostring",
    "tonumber", "ascii_downcase", "ascii_upcase", "keys", "keys_unsorted", "tojson",
    "fromjson", "add", "any", "all", "min", "max", "sort", "unique", "reverse", "to_entries",
    "from_entries", "explode", "implode", "first", "last", "floor", "ceil", "round", "sqrt",
    "fabs", "isinfinite", "isnan", "isnormal", "infinite", "nan", "error", "trim", "ltrim",
    "rtrim",
})  # fmt: skip
#: One output whenever each argument has one (their outputs are combined, one per choice).
_SINGLE_ARGS = frozenset({
    ("test", 1), ("test", 2), ("startswith", 1), ("endswith", 1), ("ltrimstr", 1),
    ("rtrimstr", 1), ("contains", 1), ("inside", 1), ("has", 1), ("in", 1), ("split", 1),
    ("join", 1), ("index", 1), ("rindex", 1), ("indices", 1), ("getpath", 1), ("error", 1),
})  # fmt: skip
#: One output whatever the arguments: they run inside a collection or a ``first``.
_COLLECTING = frozenset({
    ("map", 1), ("any", 1), ("all", 1), ("any", 2), ("all", 2), ("sort_by", 1),
    ("group_by", 1), ("unique_by", 1), ("min_by", 1), ("max_by", 1), ("with_entries", 1),
})  # fmt: skip
#: Never skipped over inside a collection: a definition's ``;`` would end an argument early.
_UNSKIPPABLE = frozenset({"def", "import", "include"})


@lru_cache(maxsize=1024)
def single_output(expr: str) -> bool:
    """True when ``expr`` yields exactly one output, or raises before yielding any."""
    try:
        proof = _Proof(tokenize(expr), 0)
        proof.pipe()
        return proof.i == len(proof.toks) and proof.i > 0
    except (Unproven, TooDeep):
        return False


class _Proof(Cursor):
    """A recursive-descent pass over jq's tokens that proves one output or gives up
    (:class:`.jqscan.Unproven`: the rule keeps the exact, ``break``, wrapper)."""

    # -- the grammar ---------------------------------------------------------------------

    def pipe(self) -> None:
        """``a | b | ...``: one output if every part has one."""
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise Unproven
        self._operators()
        while self._peek_is("|"):
            self.i += 1
            self._operators()
        self.depth -= 1

    def _operators(self) -> None:
        """One-output operands joined by operators that combine one output each (not ",")."""
        self._joined(_BINARY, self._operand)

    def _operand(self, tok: Token) -> None:
        self._term(tok)
        self._suffixes()

    def _term(self, tok: Token) -> None:
        kind, text = tok.kind, tok.text
        if kind in ("field", "num"):
            return
        if kind == "punct" and text == ".":
            nxt = self._peek()
            if nxt is not None and nxt.kind == "str":
                self.i += 1
                self._string(nxt)
            elif self._peek_is("["):
                self._index()
            return  # "." alone: the input itself
        if kind == "str":
            self._string(tok)
        elif kind == "format":
            nxt = self._peek()
            if nxt is not None and nxt.kind == "str":
                self.i += 1
                self._string(nxt)
        elif kind == "var":
            if text.startswith("$__") or text in FORBIDDEN_VARIABLES:
                raise Unproven  # the wrapper's names, and what the prelude disarms
        elif kind == "punct" and text == "(":
            self.pipe()
            self._expect(")")
        elif kind == "punct" and text == "[":
            self._skip_to("]")  # whatever it yields, it is collected: one array
            self._expect("]")
        elif kind == "ident" and text == "if":
            self._if()
        elif kind == "ident":
            self._call(text)
        else:
            raise Unproven

    def _suffixes(self) -> None:
        """``.a``, ``."a"``, ``[i]``, ``.[i]``, slices: one output each; ``[]`` and ``?`` not."""
        while (tok := self._peek()) is not None:
            if tok.kind == "field":
                self.i += 1
            elif tok.kind == "punct" and tok.text == "." and (nxt := self._peek(1)) is not None:
                if nxt.kind == "str":
                    self.i += 2
                    self._string(nxt)
                elif self._peek_is("[", 1):
                    self.i += 1
                    self._index()
                else:
                    return
            elif tok.kind == "punct" and tok.text == "[":
                self._index()
            else:
                return

    def _index(self) -> None:
        """At ``[``: an index or a slice of one-output bounds (``[]`` iterates: give up)."""
        self._expect("[")
        if self._peek_is("]"):
            raise Unproven
        if not self._peek_is(":"):
            self.pipe()
        if self._peek_is(":"):
            self.i += 1
            if not self._peek_is("]"):
                self.pipe()
        self._expect("]")

    def _string(self, tok: Token) -> None:
        for code in tok.parts:  # each interpolation's outputs multiply the string's
            inner = _Proof(tokenize(code), self.depth + 1)
            inner.pipe()
            if inner.i != len(inner.toks):
                raise Unproven

    def _if(self) -> None:
        self.pipe()
        self._expect("then")
        self.pipe()
        while True:
            tok = self._next()
            if tok.text == "elif":
                self.pipe()
                self._expect("then")
                self.pipe()
            elif tok.text == "else":
                self.pipe()
                self._expect("end")
                return
            elif tok.text == "end":
                return  # no else: the input itself, one output
            else:
                raise Unproven

    def _call(self, name: str) -> None:
        if not self._peek_is("("):
            if name not in _NULLARY:
                raise Unproven
            return
        self.i += 1
        args = 1 + self._count_args()
        if (name, args) in _COLLECTING:
            for n in range(args):
                self._skip_to(")" if n == args - 1 else ";")
                self.i += 1
            return
        if (name, args) not in _SINGLE_ARGS:
            raise Unproven
        for n in range(args):
            self.pipe()
            self._expect(")" if n == args - 1 else ";")

    def _count_args(self) -> int:
        """The ``;`` separating the arguments of the call whose ``(`` was just read."""
        depth, count, j = 0, 0, self.i
        while j < len(self.toks):
            tok = self.toks[j]
            if tok.kind == "punct" and tok.text in ("(", "[", "{"):
                depth += 1
            elif tok.kind == "punct" and tok.text in (")", "]", "}"):
                if depth == 0:
                    return count
                depth -= 1
            elif tok.kind == "punct" and tok.text == ";" and depth == 0:
                count += 1
            elif tok.kind == "ident" and tok.text in _UNSKIPPABLE:
                raise Unproven
            j += 1
        raise Unproven

    def _skip_to(self, closer: str) -> None:
        """Past any expression (balanced brackets) up to ``closer`` at this level."""
        depth = 0
        while (tok := self._peek()) is not None:
            if tok.kind == "punct":
                if depth == 0 and tok.text == closer:
                    return
                if tok.text in ("(", "[", "{"):
                    depth += 1
                elif tok.text in (")", "]", "}"):
                    if depth == 0:
                        raise Unproven
                    depth -= 1
            elif tok.kind == "ident" and tok.text in _UNSKIPPABLE:
                raise Unproven
            self.i += 1
        raise Unproven
