"""Which envelope paths a rule set reads, and the envelope cut down to them for the sandbox.

An evaluator parses the whole envelope before it runs a rule: for a 5 KB payload that parse
(and the server's encoding of it) costs more than 32 typical rules. Most rules read a few
fixed paths (``.kind``, ``.payload.action``, ``.headers["x-github-event"]``), so the stage
sends only those subtrees. That is sound only if no rule can tell the difference, so the
analysis proves it or gives up; giving up (``None``) sends the whole envelope, as before.

What is proven, for every rule of the set:

- the envelope (the root) is only ever read through a chain of string keys written in the
  rule (``.a.b``, ``.["a"]``, ``."a"``), and every such chain's end is kept whole: whatever
  the rule does with that value (``| test(..)``, ``[]``, ``keys``, an error quoting it) sees
  the same value;
- an object on the way to a kept path is only ever indexed by one of those keys, never
  output, so that it lost its other keys cannot show; a value on the way that is not an
  object is kept whole, so indexing it fails (or not) exactly as before;
- a key missing from the envelope reads as ``null`` in both.

So the root never flows anywhere as a value: a bare ``.``, ``..``, ``.[]``, a computed key,
a function applied to the root (``keys``, ``has``, ``tojson``, ``select``, ``@json``, ...),
object construction, ``if`` without ``else``, and every binding form (``as``, ``def``,
``reduce``, ``foreach``, ``label``) in root context give up, as do the wrapper's own
variables (``$__e`` is the whole envelope). To the right of a pipe whose left side is
proven, the input is a kept value, so anything goes there except reaching the root again
(``$__*``, ``$ENV``, ``env``, ``input``). The tests check the claim by evaluating generated
rules with jq on both envelopes and comparing every output and error.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

from .jqscan import MAX_DEPTH, Cursor, Unproven
from .jqtokens import Token, TooDeep, tokenize

Path = tuple[str, ...]

_BINARY = frozenset({",", "//", "==", "!=", "<", "<=", ">", ">=", "+", "-", "*", "/", "%"})
#: Applied to the root, these answer the same for any object (the root always is one).
_ROOT_SAFE_CALLS = frozenset({"true", "false", "null", "empty", "not"})
#: What reaches the root, or the host, from anywhere in a rule.
_ESCAPES = frozenset({"env", "input", "inputs", "input_filename", "$ENV", "$__loc__"})


def rule_reads(expr: str) -> frozenset[Path] | None:
    """The envelope paths ``expr`` reads (a kept path's whole subtree included), or None.

    None means: send the whole envelope.
    """
    try:
        reader = _Reader(tokenize(expr), 0)
        reader.pipe(root=True)
        if reader.i != len(reader.toks):
            return None  # a stray closer: not jq we understand (it would not compile anyway)
        return frozenset(reader.paths)
    except (Unproven, TooDeep):
        return None


@lru_cache(maxsize=256)
def rule_set_reads(exprs: tuple[str, ...]) -> frozenset[Path] | None:
    """The union of every rule's paths (None when any rule needs the whole envelope)."""
    paths: set[Path] = set()
    for expr in exprs:
        found = rule_reads(expr)
        if found is None:
            return None
        paths |= found
    return frozenset(paths)


def project(envelope: Mapping[str, Any], paths: Iterable[Path]) -> dict[str, Any]:
    """``envelope`` with only ``paths``, each kept whole (a shorter path wins)."""
    return cut(envelope, trie_of(paths))


def trie_of(paths: Iterable[Path]) -> dict[str, Any] | None:
    """``paths`` as :func:`cut` walks them (None: the whole envelope), built once per rule
    set rather than per delivery."""
    trie: dict[str, Any] = {}
    for path in sorted(set(paths), key=len):
        if not path:
            return None
        node = trie
        for key in path[:-1]:
            node = node.setdefault(key, {})
            if node is _WHOLE:
                break
        else:
            node[path[-1]] = _WHOLE
    return trie


def cut(envelope: Mapping[str, Any], trie: dict[str, Any] | None) -> dict[str, Any]:
    """``envelope`` with only the paths of ``trie`` (:func:`trie_of`)."""
    return dict(envelope) if trie is None else _cut(envelope, trie)


_WHOLE: Any = object()


def _cut(value: Mapping[str, Any], trie: dict[str, Any]) -> dict[str, Any]:
    # in the trie's key order: the order of an object on the way cannot show (it is only
    # ever indexed), and a kept value is the original object, its order and all
    out = {}
    for key, want in trie.items():
        if key in value:
            sub = value[key]
            # kept whole; a value on the way that is no object fails to index as before
            out[key] = sub if want is _WHOLE or not isinstance(sub, dict) else _cut(sub, want)
    return out


class _Reader(Cursor):
    """A recursive-descent pass over jq's tokens that collects root paths or gives up
    (:class:`.jqscan.Unproven`: the rule may read the envelope in a way not proven harmless)."""

    def __init__(self, toks: list[Token], depth: int) -> None:
        super().__init__(toks, depth)
        self.paths: set[Path] = set()

    # -- the grammar ---------------------------------------------------------------------

    def pipe(self, root: bool) -> None:
        """``a | b | ...`` up to the closer of the enclosing construct."""
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise Unproven
        try:
            self._pipe(root)
        finally:
            self.depth -= 1

    def _pipe(self, root: bool) -> None:
        if root:
            self._operators()
        else:
            self._anything()
        while (tok := self._peek()) is not None and tok.kind == "punct" and tok.text == "|":
            self.i += 1
            self._anything()  # right of a proven left side: the input is a kept value

    def _operators(self) -> None:
        """Operands in root context joined by operators that keep their input."""
        self._joined(_BINARY, self._operand)

    def _operand(self, tok: Token) -> None:
        """One term in root context and its suffixes."""
        if tok.kind == "field":
            self._path([tok.text[1:]])
            return
        if tok.kind == "punct" and tok.text == ".":
            nxt = self._peek()
            if nxt is not None and nxt.kind == "str":
                self.i += 1
                self._path([self._literal(nxt)])
                return
            if nxt is not None and nxt.text == "[":
                key = self._key_in_brackets()
                if key is not None:
                    self._path([key])
                    return
            raise Unproven  # the root itself, .[], .[expr]
        if tok.kind == "num":
            pass
        elif tok.kind == "str":
            self._string(tok)
        elif tok.kind == "format":
            nxt = self._peek()
            if nxt is None or nxt.kind != "str":
                raise Unproven  # @json etc. applied to the root
            self.i += 1
            self._string(nxt)
        elif tok.kind == "var":
            self._variable(tok.text)
        elif tok.kind == "punct" and tok.text == "(":
            self.pipe(root=True)
            self._expect(")")
        elif tok.kind == "punct" and tok.text == "[":
            if not self._peek_is("]"):
                self.pipe(root=True)
            self._expect("]")
        elif tok.kind == "ident" and tok.text == "if":
            self._if()
        elif tok.kind == "ident" and tok.text in ("any", "all"):
            self._any_all()
        elif tok.kind == "ident" and tok.text in _ROOT_SAFE_CALLS:
            nxt = self._peek()
            if nxt is not None and nxt.text == "(":
                raise Unproven  # another arity: not a builtin we vouch for
        else:
            raise Unproven
        self._suffixes()

    def _path(self, path: list[str]) -> None:
        """A chain of string keys from the root; whatever follows reads the kept value."""
        while True:
            tok = self._peek()
            if tok is None:
                break
            if tok.kind == "field":
                self.i += 1
                path.append(tok.text[1:])
            elif tok.kind == "punct" and tok.text == "." and self._is_str(1):
                self.i += 2
                path.append(self._literal(self.toks[self.i - 1]))
            elif tok.kind == "punct" and tok.text in (".", "[") and self._bracket_at(tok):
                saved = self.i
                if tok.text == ".":
                    self.i += 1
                key = self._key_in_brackets()
                if key is None:
                    self.i = saved
                    break
                path.append(key)
            elif tok.kind == "punct" and tok.text == "?":
                self.i += 1
            else:
                break
        self.paths.add(tuple(path))
        self._suffixes()

    def _suffixes(self) -> None:
        """Indexing a value that is not the root; an index expression reads the root."""
        while (tok := self._peek()) is not None:
            if tok.kind == "field" or (tok.kind == "punct" and tok.text == "?"):
                self.i += 1
            elif tok.kind == "punct" and tok.text == "." and self._is_str(1):
                self.i += 2
            elif tok.kind == "punct" and tok.text in (".", "[") and self._bracket_at(tok):
                if tok.text == ".":
                    self.i += 1
                self._expect("[")
                # in jq, E[I] and E[I:J] evaluate I and J against E's input: the root here
                while self._peek() is not None and not self._peek_is("]"):
                    if self._peek_is(":"):
                        self.i += 1
                        continue
                    self.pipe(root=True)
                self._expect("]")
            else:
                return

    def _is_str(self, ahead: int) -> bool:
        tok = self._peek(ahead)
        return tok is not None and tok.kind == "str"

    def _bracket_at(self, tok: Token) -> bool:
        if tok.text == "[":
            return True
        nxt = self._peek(1)
        return nxt is not None and nxt.text == "["

    def _key_in_brackets(self) -> str | None:
        """At ``[``: the key of ``["literal"]`` (consumed), else None (nothing consumed)."""
        key, close = self._peek(1), self._peek(2)
        if key is None or key.kind != "str" or close is None or close.text != "]":
            return None
        value = self._literal(key)
        self.i += 3
        return value

    def _literal(self, tok: Token) -> str:
        if tok.parts:
            raise Unproven  # a computed key
        try:
            value = json.loads(tok.raw)
        except ValueError:
            raise Unproven from None
        if not isinstance(value, str):
            raise Unproven
        return value

    def _string(self, tok: Token) -> None:
        for code in tok.parts:  # "\(x)" evaluates x against the string's own input
            inner = _Reader(tokenize(code), self.depth + 1)
            inner.pipe(root=True)
            if inner.i != len(inner.toks):
                raise Unproven
            self.paths |= inner.paths

    def _variable(self, name: str) -> None:
        if name.startswith("$__") or name in _ESCAPES:
            raise Unproven  # the wrapper's $__e is the whole envelope

    def _if(self) -> None:
        self.pipe(root=True)
        self._expect("then")
        self.pipe(root=True)
        while True:
            tok = self._next()
            if tok.text == "elif":
                self.pipe(root=True)
                self._expect("then")
                self.pipe(root=True)
            elif tok.text == "else":
                self.pipe(root=True)
                self._expect("end")
                return
            else:
                raise Unproven  # "if c then a end" outputs the root when c is false

    def _any_all(self) -> None:
        """``any(gen; cond)``: gen reads the root, cond reads gen's outputs."""
        self._expect("(")
        self.pipe(root=True)
        self._expect(";")
        self._anything()
        self._expect(")")

    def _anything(self) -> None:
        """Skip an expression whose input is a kept value, up to its closer.

        Anything is allowed except what reaches the root or the host again; ``def`` is
        refused so that its ``;`` cannot be mistaken for the end of an argument.
        """
        depth = 0
        while (tok := self._peek()) is not None:
            if tok.kind == "punct":
                if tok.text in ("(", "[", "{"):
                    depth += 1
                elif tok.text in (")", "]", "}"):
                    if depth == 0:
                        return
                    depth -= 1
                elif tok.text in (";", ":") and depth == 0:
                    return
            elif tok.kind == "ident":
                if tok.text == "if":
                    depth += 1
                elif tok.text == "end":
                    if depth == 0:
                        return
                    depth -= 1
                elif tok.text in ("then", "elif", "else") and depth == 0:
                    return
                elif tok.text in ("def", "import", "include") or tok.text in _ESCAPES:
                    raise Unproven
            elif tok.kind == "var":
                self._variable(tok.text)
            elif tok.kind == "str":
                for code in tok.parts:
                    inner = _Reader(tokenize(code), self.depth + 1)
                    inner._anything()
                    if inner.i != len(inner.toks):
                        raise Unproven
            self.i += 1
