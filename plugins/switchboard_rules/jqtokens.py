"""jq's lexer: a rule's tokens, as libjq 1.7/1.8 lexes them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

# The token shapes of libjq's lexer (src/lexer.l, 1.7/1.8). flex takes the longest match, so a
# number's exponent needs digits: "1else" is 1 then else, "1e-env" is 1, e, -, env.
_NUMBER = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_NAME = r"[a-zA-Z_][a-zA-Z_0-9]*"
_IDENT = re.compile(rf"(?:{_NAME}::)*{_NAME}")  # module-qualified names: a::b
_FIELD = re.compile(rf"\.{_NAME}")
_VAR = re.compile(rf"\$(?:{_NAME}::)*{_NAME}")  # "$ name" is a syntax error since jq 1.7
_FORMAT = re.compile(r"@[a-zA-Z0-9_]+")
_OPS = ("?//", "//=", "!=", "==", "//", "|=", "+=", "-=", "*=", "/=", "%=", "<=", ">=", "..")
_SPACE = " \t\r\n"  # \f and \v are invalid characters to jq
# Brackets: the openers, and each closer's opener.
OPENERS, CLOSERS = frozenset("([{"), {")": "(", "]": "[", "}": "{"}


#: Interpolations inside interpolations the lexer follows (each level is Python recursion;
#: a 4 KiB rule could nest ~680 deep). Deeper, the expression is refused as unanalysable.
MAX_NESTING = 64


class TooDeep(ValueError):
    """An expression nests string interpolations past :data:`MAX_NESTING`."""


@dataclass
class Token:
    """One lexeme: ``kind`` is ident, field, var, str, num, format or punct.

    A string (``text`` is just ``"``) also keeps its source, quotes included, in ``raw`` and
    the code of its top-level interpolations in ``parts``. ``at`` is where it starts in the
    source it was lexed from.
    """

    kind: str
    text: str
    raw: str = ""
    parts: tuple[str, ...] = ()
    at: int = field(default=-1, compare=False)


class Lexer:
    """Lexes one source; keeps the code of its top-level strings' interpolations."""

    def __init__(self, src: str) -> None:
        self.src = src
        self.pos = 0
        self.strings: list[str] = []  # interpolated code found inside top-level strings
        self.nesting = 0
        #: Where the innermost string the source leaves open starts (its opening quote)
        self.unterminated: int | None = None

    def _match(self, pattern: re.Pattern[str]) -> str | None:
        m = pattern.match(self.src, self.pos)
        if m is None:
            return None
        self.pos = m.end()
        return m.group()

    def _comment(self) -> None:
        # jq 1.7.1+: a backslash escapes the next character, and backslash-(CR)LF continues
        # the comment onto the next line; only an unescaped LF ends it (a lone CR does not).
        src = self.src
        while self.pos < len(src):
            ch = src[self.pos]
            if ch == "\n":
                return
            if ch == "\\":
                self.pos += 3 if src.startswith("\r\n", self.pos + 1) else 2
                continue
            self.pos += 1

    def _string(self) -> None:
        # at the opening quote; collects interpolations as nested code
        src = self.src
        opening = self.pos
        self.pos += 1
        while self.pos < len(src):
            ch = src[self.pos]
            if ch == '"':
                self.pos += 1
                return
            if ch == "\\":
                if src.startswith("(", self.pos + 1):
                    if self.nesting >= MAX_NESTING:
                        raise TooDeep("string interpolations nested too deep to analyse")
                    self.pos += 2
                    start = self.pos
                    self.nesting += 1
                    self._skip_code_until_close()
                    self.nesting -= 1
                    if self.nesting == 0:  # deeper levels are found when this one is scanned
                        self.strings.append(src[start : self.pos - 1])
                    continue
                self.pos += 2
                continue
            self.pos += 1
        if self.unterminated is None:  # the innermost open string reaches the end first
            self.unterminated = opening

    def _skip_code_until_close(self) -> None:
        # inside \( ... ): run the lexer until the ')' that closes the interpolation
        depth = 0
        for tok in self._tokens():
            if tok.kind != "punct":
                continue
            if tok.text in OPENERS:
                depth += 1
            elif tok.text in CLOSERS:
                if depth == 0 and tok.text == ")":
                    return
                depth -= 1

    def tokens(self) -> list[Token]:
        return list(self._tokens())

    def _tokens(self) -> Iterator[Token]:
        src = self.src
        while self.pos < len(src):
            ch = src[self.pos]
            at = self.pos
            if ch in _SPACE:
                self.pos += 1
            elif ch == "#":
                self._comment()
            elif ch == '"':
                first = len(self.strings)
                self._string()
                yield Token("str", '"', src[at : self.pos], tuple(self.strings[first:]), at)
            elif (text := self._match(_IDENT)) is not None:
                yield Token("ident", text, at=at)
            elif (text := self._match(_NUMBER)) is not None:
                yield Token("num", text, at=at)
            elif (text := self._match(_FIELD)) is not None:
                yield Token("field", text, at=at)
            elif (text := self._match(_VAR)) is not None:
                yield Token("var", text, at=at)
            elif (text := self._match(_FORMAT)) is not None:
                yield Token("format", text, at=at)
            else:
                op = next((op for op in _OPS if src.startswith(op, self.pos)), ch)
                self.pos += len(op)
                yield Token("punct", op, at=at)


def tokenize(expr: str) -> list[Token]:
    """The top-level tokens of ``expr`` (string interpolations are not inlined)."""
    return Lexer(expr).tokens()
