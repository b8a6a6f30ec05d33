"""A jq compile error of one rule, told in that rule's terms: its own lines and columns.

libjq reports positions in the program it compiled: the sandbox's wrapper around the rule
(:func:`.program.build_program`). A rule compiled alone starts on :data:`FIRST_LINE` of
that program, so its line is jq's less the wrapper's lines; a position past the rule's
text is the wrapper's own (``.kind ==`` meets the wrapper's ``)``), which the rule's author
never wrote: that is the end of their expression.

A string the rule leaves open runs into the wrapper, whose tokens jq then expects or meets;
so the rule is told where that string starts instead. Brackets that do not nest are found
before any compile (:func:`.jqscan.bracket_fault`), and told at the bracket at fault.
"""

from __future__ import annotations

import re

from ..jqscan import bracket_fault, unterminated_string
from .program import build_program

_MARK = "__rule_starts_here__"
_PROBE = build_program([_MARK], [0], sweep=True)
#: The line of the single-rule (trial) program on which the rule's own text starts.
FIRST_LINE = _PROBE[: _PROBE.index(_MARK)].count("\n") + 1

_ERROR = re.compile(
    r"jq: error: (?P<msg>.*?) at <top-level>, line (?P<line>\d+)(?:, column (?P<col>\d+))?:"
)
_UNEXPECTED = re.compile(r"unexpected (?:'[^']*'|[^\s,]+)")
#: The most characters of the rule's line an excerpt shows.
EXCERPT_MAX = 100


def _carets(raw: str, after: int) -> int:
    """How many carets jq drew under the token (1 when it drew none)."""
    for line in raw[after:].splitlines():
        stripped = line.strip()
        if stripped and set(stripped) == {"^"}:
            return len(stripped)
    return 1


def _position(expr: str, offset: int) -> tuple[int, int]:
    """The line and column (both from 1) of ``expr``'s character at ``offset``."""
    line_start = expr.rfind("\n", 0, offset) + 1
    return expr.count("\n", 0, offset) + 1, offset - line_start + 1


def _unterminated(expr: str, opening: int) -> str:
    line, column = _position(expr, opening)
    return _excerpt("syntax error: unterminated string starting", expr, line, column, 1)


def unbalanced_in_rule_terms(expr: str) -> str:
    """Why ``expr``'s brackets do not nest (:func:`.jqscan.balanced` is false), told at the
    bracket at fault; a string left open (which swallowed the rest) is told first."""
    opening = unterminated_string(expr)
    if opening is not None:
        return _unterminated(expr, opening)
    fault = bracket_fault(expr)
    if fault is None or fault.at is None:
        return "syntax error: unbalanced brackets"
    what = f"unclosed '{fault.bracket}'" if fault.unclosed else f"unexpected '{fault.bracket}'"
    line, column = _position(expr, fault.at)
    return _excerpt(f"syntax error: {what}", expr, line, column, 1)


def in_rule_terms(raw: str, expr: str) -> str | None:
    """``raw`` (libjq's message for ``expr`` compiled alone) at the rule's own line and
    column, with a caret excerpt; None when ``raw`` names no position."""
    found = _ERROR.search(raw)
    lines = expr.split("\n")
    line = int(found["line"]) - FIRST_LINE + 1 if found else 0
    if line > len(lines) or line < 1:
        # the wrapper's own text (or no position: a string's escape can eat the wrapper's
        # newline, and jq quotes it): a string the rule left open ran into the wrapper
        opening = unterminated_string(expr)
        if opening is not None:
            return _unterminated(expr, opening)
    if found is None:
        return None
    message = found["msg"]
    column = int(found["col"]) if found["col"] else None
    width = _carets(raw, found.end())
    if line > len(lines) or line < 1:
        # the wrapper's own text: the rule ended before jq could make sense of it
        message = _UNEXPECTED.sub("unexpected end of the expression", message, count=1)
        line = max(1, len(lines))
        column, width = len(lines[line - 1]) + 1, 1
    return _excerpt(message, expr, line, column, width)


def _excerpt(message: str, expr: str, line: int, column: int | None, width: int) -> str:
    """``message`` at ``line`` and ``column`` of ``expr``, then that line with ``width``
    carets under the column (the line alone when there is no column)."""
    text = expr.split("\n")[line - 1]
    where = f"line {line}" + (f", column {column}" if column is not None else "")
    if column is None:
        return f"{message} at {where}:\n    {text[:EXCERPT_MAX]}"
    start = max(0, column - 1 - EXCERPT_MAX // 2) if len(text) > EXCERPT_MAX else 0
    shown = text[start : start + EXCERPT_MAX]
    width = max(1, min(width, len(shown) - (column - 1 - start))) if shown else 1
    return f"{message} at {where}:\n    {shown}\n    {' ' * (column - 1 - start)}{'^' * width}"
