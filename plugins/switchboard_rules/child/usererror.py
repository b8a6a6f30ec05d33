"""A jq compile error of one rule, told in that rule's terms: its own lines and columns.

libjq reports positions in the program it compiled: the sandbox's wrapper around the rule
(:func:`.program.build_program`). A rule compiled alone starts on :data:`FIRST_LINE` of
that program, so its line is jq's less the wrapper's lines; a position past the rule's
text is the wrapper's own (``.kind ==`` meets the wrapper's ``)``), which the rule's author
never wrote: that is the end of their expression.
"""

from __future__ import annotations

import re

from .program import build_program

_MARK = "__rule_starts_here__"
_PROBE = build_program([_MARK], [0], sweep=True)
#: The line of the single-rule (trial) program on which the rule's own text starts.
FIRST_LINE = _PROBE[: _PROBE.index(_MARK)].count("\n") + 1

_ERROR = re.compile(
    r"jq: error: (?P<msg>.*?) at <top-level>, line (?P<line>\d+)(?:, column (?P<col>\d+))?:"
)
_UNEXPECTED = re.compile(r"unexpected (?:'[^']*'|\S+)")
#: The most characters of the rule's line an excerpt shows.
EXCERPT_MAX = 100


def _carets(raw: str, after: int) -> int:
    """How many carets jq drew under the token (1 when it drew none)."""
    for line in raw[after:].splitlines():
        stripped = line.strip()
        if stripped and set(stripped) == {"^"}:
            return len(stripped)
    return 1


def in_rule_terms(raw: str, expr: str) -> str | None:
    """``raw`` (libjq's message for ``expr`` compiled alone) at the rule's own line and
    column, with a caret excerpt; None when ``raw`` names no position."""
    found = _ERROR.search(raw)
    if found is None:
        return None
    message = found["msg"]
    lines = expr.split("\n")
    line = int(found["line"]) - FIRST_LINE + 1
    column = int(found["col"]) if found["col"] else None
    width = _carets(raw, found.end())
    if line > len(lines) or line < 1:
        # the wrapper's own text: the rule ended before jq could make sense of it
        message = _UNEXPECTED.sub("unexpected end of the expression", message, count=1)
        line = max(1, len(lines))
        column, width = len(lines[line - 1]) + 1, 1
    text = lines[line - 1]
    where = f"line {line}" + (f", column {column}" if column is not None else "")
    if column is None:
        return f"{message} at {where}:\n    {text[:EXCERPT_MAX]}"
    start = max(0, column - 1 - EXCERPT_MAX // 2) if len(text) > EXCERPT_MAX else 0
    shown = text[start : start + EXCERPT_MAX]
    width = max(1, min(width, len(shown) - (column - 1 - start))) if shown else 1
    return f"{message} at {where}:\n    {shown}\n    {' ' * (column - 1 - start)}{'^' * width}"
