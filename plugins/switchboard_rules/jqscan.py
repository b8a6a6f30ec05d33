"""What a jq rule calls, checks of its brackets and strings, a prelude to disarm forbidden calls."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from .jqtokens import CLOSERS, OPENERS, Lexer, Token, TooDeep, tokenize

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
#: Each arity libjq 1.8 defines for a forbidden function (import and include are keywords).
FORBIDDEN_ARITIES = frozenset(
    {
        ("env", 0), ("input", 0), ("inputs", 0), ("input_filename", 0), ("input_line_number", 0),
        ("debug", 0), ("debug", 1), ("stderr", 0), ("halt", 0), ("halt_error", 0),
        ("halt_error", 1), ("now", 0), ("localtime", 0), ("strflocaltime", 1),
        ("get_search_list", 0), ("get_jq_origin", 0), ("get_prog_origin", 0), ("modulemeta", 0),
    }
)  # fmt: skip

KEYWORDS = frozenset(
    {
        "def", "import", "include", "module", "as", "reduce", "foreach", "if", "then",
        "elif", "else", "end", "try", "catch", "label", "break", "and", "or", "__loc__",
    }
)  # fmt: skip
_NOT_CALLS = KEYWORDS - {"import", "include"}


@dataclass
class Scan:
    """What an expression uses: called function names and referenced variables."""

    calls: set[str] = field(default_factory=set)
    variables: set[str] = field(default_factory=set)


class Unproven(Exception):
    """A pass over a rule's tokens cannot prove what it set out to: it gives up."""


#: Closes the expression a parse is in: a bracket, a ``;`` between arguments, a slice's
#: ``:``, a pipe, or a part of ``if`` ... ``end``.
STOPS = frozenset({")", "]", "}", ";", ":", "|"})
STOP_WORDS = frozenset({"then", "elif", "else", "end"})
#: Nesting (brackets, ``if``, interpolations) past which a pass gives up: a tenant's 4 KiB
#: rule may nest 1,300 deep, which jq compiles but Python's stack would not walk.
MAX_DEPTH = 48


class Cursor:
    """A position in a rule's tokens, shared by the passes that prove things of a rule
    (``reads``: which envelope paths it reads; ``single``: that it gives one output)."""

    def __init__(self, toks: list[Token], depth: int) -> None:
        if depth > MAX_DEPTH:
            raise Unproven
        self.toks = toks
        self.i = 0
        self.depth = depth

    def _peek(self, ahead: int = 0) -> Token | None:
        j = self.i + ahead
        return self.toks[j] if j < len(self.toks) else None

    def _next(self) -> Token:
        tok = self._peek()
        if tok is None:
            raise Unproven
        self.i += 1
        return tok

    def _peek_is(self, text: str, ahead: int = 0) -> bool:
        tok = self._peek(ahead)
        return tok is not None and tok.text == text

    def _expect(self, text: str) -> None:
        if self._next().text != text:
            raise Unproven

    def _at_stop(self) -> bool:
        tok = self._peek()
        if tok is None:
            return True
        if tok.kind == "punct":
            return tok.text in STOPS
        return tok.kind == "ident" and tok.text in STOP_WORDS

    def _joined(self, binary: frozenset[str], operand: Callable[[Token], None]) -> None:
        """Operands (each ``operand``, after an optional unary minus) joined by ``binary``
        operators or ``and``/``or``, up to the closer; anything else gives up."""
        expecting = True
        while not self._at_stop():
            tok = self._next()
            if expecting:
                if tok.kind == "punct" and tok.text == "-":
                    continue  # unary minus
                operand(tok)
                expecting = False
            elif (tok.kind == "punct" and tok.text in binary) or (
                tok.kind == "ident" and tok.text in ("and", "or")
            ):
                expecting = True
            else:
                raise Unproven  # as, assignments, ?//, and anything not understood
        if expecting:
            raise Unproven


def scan(expr: str) -> Scan:
    """Find every function called and every variable referenced in ``expr``."""
    out = Scan()
    _scan_into(expr, out, depth=0)
    return out


def _scan_into(expr: str, out: Scan, depth: int) -> None:
    if depth > 64:  # absurd nesting of interpolations: refuse to analyse further
        out.calls.add("import")
        return
    lexer = Lexer(expr)
    try:
        toks = lexer.tokens()
    except TooDeep:  # refused like the depth guard above: nothing that deep is analysed
        out.calls.add("import")
        return
    # what encloses each token: a bracket, or "if" (jq 1.7+ allows if...end, commas and all,
    # as an object value: in {a: if . then 1, env, 2 end} env is a call, not a key)
    context: list[str] = []
    i = 0
    while i < len(toks):
        tok = toks[i]
        prev = toks[i - 1] if i else None
        nxt = toks[i + 1] if i + 1 < len(toks) else None
        if tok.kind == "punct":
            if tok.text in OPENERS:
                context.append(tok.text)
            elif tok.text in CLOSERS and CLOSERS[tok.text] in context:
                while context.pop() != CLOSERS[tok.text]:
                    pass
        elif tok.kind == "var":
            out.variables.add(tok.text)  # {$ENV} is {"ENV": $ENV}: still a use
        elif tok.kind == "ident":
            if _at_object_key(context, prev, nxt):
                pass  # an object key ({env: 1}) or shorthand field ({env} = {env: .env})
            elif tok.text == "def":
                i = _skip_def_header(toks, i + 1)
                continue
            elif tok.text == "if":
                context.append("if")
            elif tok.text == "end" and "if" in context:
                while context.pop() != "if":
                    pass
            elif tok.text not in _NOT_CALLS:
                out.calls.add(tok.text)
        i += 1
    for inner in lexer.strings:
        _scan_into(inner, out, depth + 1)


def _punct(tok: Token | None, texts: tuple[str, ...]) -> bool:
    return tok is not None and tok.kind == "punct" and tok.text in texts


def _at_object_key(context: list[str], prev: Token | None, nxt: Token | None) -> bool:
    in_object = bool(context) and context[-1] == "{"
    return in_object and _punct(prev, ("{", ",")) and _punct(nxt, (":", ",", "}"))


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


#: jq's own ``$__``-variable: every other ``$__`` name is the sandbox wrapper's.
JQ_DOUBLE_UNDERSCORE = frozenset({"$__loc__", "$__prog_args"})


def wrapper_names(expr: str) -> list[str]:
    """Sorted ``$__`` variables and labels ``expr`` names that are not jq's own.

    They are the sandbox wrapper's (``$__e`` the envelope, ``$__s``, the label ``$__l``):
    a rule never sees them, so naming one is refused at save, as jq refuses an undefined
    name.
    """
    found = scan(expr).variables
    return sorted(v for v in found if v.startswith("$__") and v not in JQ_DOUBLE_UNDERSCORE)


@dataclass(frozen=True)
class BracketFault:
    """Why an expression's brackets do not nest: ``bracket`` at offset ``at`` of it is a
    closer that closes nothing open (``unclosed`` false) or the innermost opener left open;
    ``at`` is None when the expression nests too deep to check."""

    at: int | None
    bracket: str = ""
    unclosed: bool = False


def bracket_fault(expr: str) -> BracketFault | None:
    """The first fault in how ``expr``'s brackets nest, None when they nest properly."""
    stack: list[Token] = []
    try:
        toks = tokenize(expr)
    except TooDeep:
        return BracketFault(None)  # never run what could not be checked
    for tok in toks:
        if tok.kind != "punct":
            continue
        if tok.text in OPENERS:
            stack.append(tok)
        elif tok.text in CLOSERS:
            if not stack or stack.pop().text != CLOSERS[tok.text]:
                return BracketFault(tok.at, tok.text)
    return BracketFault(stack[-1].at, stack[-1].text, unclosed=True) if stack else None


def balanced(expr: str) -> bool:
    """True when ``expr``'s brackets nest properly (a rule cannot escape its wrapper)."""
    return bracket_fault(expr) is None


def unterminated_string(expr: str) -> int | None:
    """Where the string ``expr`` leaves open starts (the innermost's opening quote, an
    offset of ``expr``), None when every string closes (or it nests too deep to tell)."""
    lexer = Lexer(expr)
    try:
        lexer.tokens()
    except TooDeep:
        return None
    return lexer.unterminated


def shadow_prelude(builtins: Iterable[str] = ()) -> str:
    """jq defs that turn every forbidden function into an error, then an empty ``$ENV``.

    Prepended to a program, they shadow libjq's builtins (jq binds names lexically), so a call
    the scanner missed raises instead of running. ``builtins`` is libjq's ``name/arity`` list:
    it adds any arity a newer libjq grows. The prelude is one line, so a rule's line numbers
    (in compile errors, or ``$__loc__``) do not move.
    """
    arities = set(FORBIDDEN_ARITIES)
    for entry in builtins:
        name, _, count = entry.rpartition("/")
        if name in FORBIDDEN_FUNCTIONS and count.isdigit():
            arities.add((name, int(count)))
    defs = []
    for name, arity in sorted(arities):
        params = "(" + "; ".join(f"__{k}" for k in range(arity)) + ")" if arity else ""
        message = json.dumps(f"{name}/{arity} is forbidden in routing rules")
        defs.append(f"def {name}{params}: error({message});")
    # $ENV is a variable, not a function: rebinding it is the only way to shadow it
    return " ".join(defs) + " {} as $ENV | "
