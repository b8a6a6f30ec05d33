"""A small jq tokenizer that finds the functions and variables an expression uses."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

#: Builtins (and variables) that read the host, the clock, the environment or the filesystem,
#: or that write outside the result (libjq 1.7/1.8 ``builtins`` inspected by hand).
FORBIDDEN_FUNCTIONS = frozenset(
    {
        "env",
        "input",
        "inputs",
        "input_filename",
        "input_line_number",
        "debug",
        "stderr",
        "halt",
        "halt_error",
        "now",
        "localtime",
        "strflocaltime",
        "get_search_list",
        "get_jq_origin",
        "get_prog_origin",
        "modulemeta",
        "import",
        "include",
    }
)
FORBIDDEN_VARIABLES = frozenset({"$ENV", "$__loc__", "$__prog_args"})

KEYWORDS = frozenset(
    {
        "def", "import", "include", "module", "as", "reduce", "foreach", "if", "then",
        "elif", "else", "end", "try", "catch", "label", "and", "or", "__loc__",
    }
)  # fmt: skip
_NOT_CALLS = KEYWORDS - {"import", "include"}
_IDENT_START = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_IDENT_CHARS = _IDENT_START | set("0123456789")


@dataclass
class Token:
    """One lexeme: ``kind`` is ident, field, var, str, num, format or punct."""

    kind: str
    text: str


@dataclass
class Scan:
    """What an expression uses: called function names and referenced variables."""

    calls: set[str] = field(default_factory=set)
    variables: set[str] = field(default_factory=set)


class _Lexer:
    def __init__(self, src: str) -> None:
        self.src = src
        self.pos = 0
        self.strings: list[str] = []  # interpolated code found inside top-level strings
        self.nesting = 0

    def _ident(self) -> str:
        start = self.pos
        while True:
            while self.pos < len(self.src) and self.src[self.pos] in _IDENT_CHARS:
                self.pos += 1
            # module-qualified names: a::b
            if (
                self.src.startswith("::", self.pos)
                and self.pos + 2 < len(self.src)
                and self.src[self.pos + 2] in _IDENT_START
            ):
                self.pos += 2
                continue
            return self.src[start : self.pos]

    def _comment(self) -> None:
        # jq 1.7.1+: a backslash escapes the next character, and backslash-(CR)LF continues
        # the comment onto the next line; an unescaped LF ends it.
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
        self.pos += 1
        while self.pos < len(src):
            ch = src[self.pos]
            if ch == '"':
                self.pos += 1
                return
            if ch == "\\":
                if src.startswith("(", self.pos + 1):
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

    def _skip_code_until_close(self) -> None:
        # inside \( ... ): run the lexer until the matching ')'
        depth = 0
        for tok in self._tokens():
            if tok.kind == "punct" and tok.text in "([{":
                depth += 1
            elif tok.kind == "punct" and tok.text in ")]}":
                if depth == 0 and tok.text == ")":
                    return
                depth -= 1

    def tokens(self) -> list[Token]:
        return list(self._tokens())

    def _tokens(self) -> Iterator[Token]:
        src = self.src
        while self.pos < len(src):
            ch = src[self.pos]
            if ch in " \t\r\n\f\v":
                self.pos += 1
            elif ch == "#":
                self._comment()
            elif ch == '"':
                self._string()
                yield Token("str", '"')
            elif ch in _IDENT_START:
                yield Token("ident", self._ident())
            elif ch == "$":
                self.pos += 1
                while self.pos < len(src) and src[self.pos] in " \t\r\n":
                    self.pos += 1  # older jq allowed "$ name"; be conservative
                name = (
                    self._ident() if self.pos < len(src) and src[self.pos] in _IDENT_START else ""
                )
                yield Token("var", "$" + name)
            elif ch == "@":
                self.pos += 1
                yield Token("format", "@" + self._ident())
            elif ch == "." and self.pos + 1 < len(src) and src[self.pos + 1] in _IDENT_START:
                self.pos += 1
                yield Token("field", "." + self._ident())
            elif ch.isdigit() or (
                ch == "." and self.pos + 1 < len(src) and src[self.pos + 1].isdigit()
            ):
                start = self.pos
                while self.pos < len(src) and (src[self.pos].isalnum() or src[self.pos] in "."):
                    self.pos += 1
                    if src[self.pos - 1] in "eE" and src.startswith(("+", "-"), self.pos):
                        self.pos += 1
                yield Token("num", src[start : self.pos])
            else:
                for op in ("?//=", "?//", "..", "|=", "+=", "-=", "*=", "/=", "%=", "//=", "==",
                           "!=", "<=", ">=", "//", "::"):  # fmt: skip
                    if src.startswith(op, self.pos):
                        self.pos += len(op)
                        yield Token("punct", op)
                        break
                else:
                    self.pos += 1
                    yield Token("punct", ch)


def tokenize(expr: str) -> list[Token]:
    """The top-level tokens of ``expr`` (string interpolations are not inlined)."""
    return _Lexer(expr).tokens()


def scan(expr: str) -> Scan:
    """Find every function called and every variable referenced in ``expr``."""
    out = Scan()
    _scan_into(expr, out, depth=0)
    return out


def _scan_into(expr: str, out: Scan, depth: int) -> None:
    if depth > 64:  # absurd nesting of interpolations: refuse to analyse further
        out.calls.add("import")
        return
    lexer = _Lexer(expr)
    toks = lexer.tokens()
    # object-construction contexts: a stack of "is this brace an object?" flags
    braces: list[bool] = []
    i = 0
    while i < len(toks):
        tok = toks[i]
        prev = toks[i - 1] if i else None
        nxt = toks[i + 1] if i + 1 < len(toks) else None
        if tok.kind == "punct":
            if tok.text in "([{":
                braces.append(tok.text == "{")
            elif tok.text in ")]}" and braces:
                braces.pop()
        elif tok.kind == "var":
            out.variables.add(tok.text)  # {$ENV} is {"ENV": $ENV}: still a use
        elif tok.kind == "ident":
            if _at_object_key(braces, prev) and nxt is not None and nxt.text in (":", ",", "}"):
                pass  # an object key ({env: 1}) or shorthand field ({env} = {env: .env})
            elif tok.text == "def":
                i = _skip_def_header(toks, i + 1)
                continue
            elif tok.text in _NOT_CALLS:
                pass
            elif prev is not None and prev.kind == "punct" and prev.text == "::":
                pass
            else:
                out.calls.add(tok.text)
        i += 1
    for inner in lexer.strings:
        _scan_into(inner, out, depth + 1)


def _at_object_key(braces: list[bool], prev: Token | None) -> bool:
    return bool(braces) and braces[-1] and prev is not None and prev.text in ("{", ",")


def _skip_def_header(toks: list[Token], i: int) -> int:
    # def NAME: ... or def NAME(params): ... ; params are names, not calls
    i += 1  # the name
    if i < len(toks) and toks[i].text == "(":
        depth = 0
        while i < len(toks):
            if toks[i].text == "(":
                depth += 1
            elif toks[i].text == ")":
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
    return i


def forbidden_names(expr: str) -> list[str]:
    """Sorted unique forbidden functions and variables ``expr`` uses (``[]`` when clean)."""
    found = scan(expr)
    names = {n for n in found.calls if n.split("::")[-1] in FORBIDDEN_FUNCTIONS}
    names |= {v for v in found.variables if v in FORBIDDEN_VARIABLES}
    return sorted(names)


def balanced(expr: str) -> bool:
    """True when ``expr``'s brackets nest properly (a rule cannot escape its wrapper)."""
    stack: list[str] = []
    pairs = {")": "(", "]": "[", "}": "{"}
    for tok in tokenize(expr):
        if tok.kind != "punct":
            continue
        if tok.text in "([{":
            stack.append(tok.text)
        elif tok.text in pairs:
            if not stack or stack.pop() != pairs[tok.text]:
                return False
    return not stack
