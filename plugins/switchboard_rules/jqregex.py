"""``test("regex")`` decided in the server: a regular subset, matched by RE2 in linear time.

jq's ``test`` runs Oniguruma. Whether a pattern matches somewhere in a string is a fact of
the regular language the pattern denotes, not of the engine, for patterns with no
back-references, look-around, possessive or lazy repeats, flags or engine-specific classes;
and the classes and anchors mean the same in every engine on text with no newline and no
other control character. So for such a pattern (:func:`in_subset`) and such a string
(printable ASCII, at most :data:`SUBJECT_MAX` characters), RE2's answer is jq's; for any
other string the filter defers to the sandbox. RE2 never backtracks: a pattern of at most
:data:`POSITIONS_MAX` positions costs at most ~0.3 ms on such a string, a usual one a few
µs, where Python's ``re`` could run for ages on ``(a*)*b``. Each program's memory is
bounded (:data:`PROGRAM_MEMORY`) and so is their number (:data:`PROGRAMS_MAX`, shared by
every rule set). Without the ``google-re2`` wheel on this platform ``test`` is simply left
to the sandbox.
"""

from __future__ import annotations

import functools
from typing import Any

from .jqfilters import Defer, Evaluate

try:
    import re2
except ImportError:  # pragma: no cover - no wheel for this platform: the sandbox decides
    re2 = None

#: The longest pattern decided here.
PATTERN_MAX = 256
#: The most positions a pattern decided here matches through, its repeats unrolled
#: (``[0-9a-f]{40}`` is 40, ``^refs/tags/v[0-9]+$`` 13): what an RE2 search costs grows
#: with it where a hostile pattern keeps the DFA from settling (~0.3 ms at 64, measured).
POSITIONS_MAX = 64
#: The longest string matched here (a ref, a name, an action); a longer one is the sandbox's.
SUBJECT_MAX = 256
#: Each RE2 program's memory, its DFA's cache included (RE2 falls back to its NFA, still
#: linear, when a pattern needs more).
PROGRAM_MEMORY = 32 << 10
#: Compiled programs kept, for every rule set of the worker together (least recently used
#: first out; one evicted is compiled again, ~20 µs, when next needed).
PROGRAMS_MAX = 512
#: The largest count of a ``{n,m}`` repeat here (RE2 refuses past 1,000).
REPEAT_MAX = 100
#: Groups nested deeper than this are left to the sandbox (each is a Python call here).
GROUPS_MAX = 16

#: Characters that mean something to a regex: a literal one is written escaped.
_SPECIAL = frozenset(".^$|()[]{}*+?\\")
#: What a backslash may escape, outside a class and in one: punctuation, read literally,
#: and the class escapes whose ASCII meaning every engine shares (``\s`` is not one: RE2's
#: lacks the vertical tab, Python's has four more controls).
_ESCAPES = frozenset(".^$|()[]{}*+?\\/-") | frozenset("dDwW")


class _Outside(Exception):
    """The pattern is outside the subset."""


def jq_test(pattern: str) -> Evaluate | None:
    """The filter ``test(pattern)``, or None when the pattern is outside the subset (the
    rule set then goes to the sandbox, which also names a pattern that does not compile)."""
    if re2 is None or not in_subset(pattern) or _program(pattern) is None:
        return None

    def test(v: Any) -> bool:
        # of anything but a string, jq's error; of a string with a control character or
        # past ASCII, an answer this subset does not prove: both the sandbox's
        if type(v) is not str or len(v) > SUBJECT_MAX or not (v.isascii() and v.isprintable()):
            raise Defer
        search = _program(pattern)
        if search is None:  # pragma: no cover - it compiled a moment ago
            raise Defer
        return search(v) is not None

    return test


@functools.lru_cache(maxsize=PROGRAMS_MAX)
def _program(pattern: str) -> Any:
    """The pattern's RE2 search, None if RE2 refuses it (a program past its memory)."""
    options = re2.Options()
    options.log_errors = False  # a refusal is ours to handle, not a line on stderr
    options.never_capture = True
    options.max_mem = PROGRAM_MEMORY
    try:
        return re2.compile(pattern, options).search
    except Exception:
        return None


def in_subset(pattern: str) -> bool:
    """Whether ``pattern`` is of the regular subset every engine reads alike: printable
    ASCII; literals, ``.``, ``^``, ``$``, classes ``[...]`` of characters and ranges (and
    ``\\d``, ``\\w``), groups ``(...)`` and ``(?:...)``, ``|``, and one greedy repeat
    (``*``, ``+``, ``?``, ``{n}``, ``{n,}``, ``{n,m}``) after an atom; at most
    :data:`POSITIONS_MAX` positions, its repeats unrolled."""
    if len(pattern) > PATTERN_MAX or not (pattern.isascii() and pattern.isprintable()):
        return False
    try:
        end, size = _Scan(pattern).alternation(0, 0)
    except _Outside:
        return False
    return end == len(pattern) and size <= POSITIONS_MAX


class _Scan:
    """A recursive-descent reading of a pattern that says where each part ends and how
    many positions it matches through (an atom one, a repeat its largest count times its
    atom's, ``*``/``+``/``?`` once: a loop; an alternation its branches' sum)."""

    def __init__(self, pattern: str) -> None:
        self.p = pattern
        self.anchors = 0  # ^ and $ read so far

    def alternation(self, i: int, depth: int) -> tuple[int, int]:
        i, size = self.sequence(i, depth)
        while i < len(self.p) and self.p[i] == "|":
            i, more = self.sequence(i + 1, depth)
            size += more
        return i, size

    def sequence(self, i: int, depth: int) -> tuple[int, int]:
        size = 0
        while i < len(self.p) and self.p[i] not in "|)":
            i, more = self.piece(i, depth)
            size += more
            if size > POSITIONS_MAX:
                raise _Outside
        return i, size

    def piece(self, i: int, depth: int) -> tuple[int, int]:
        p, c = self.p, self.p[i]
        repeatable, size = True, 1
        if c in "^$":
            i, repeatable, size = i + 1, False, 0
            self.anchors += 1
        elif c == "(":
            if depth >= GROUPS_MAX:
                raise _Outside
            start = i + 3 if p.startswith("(?:", i) else i + 1
            if p.startswith("(?", i) and start == i + 1:
                raise _Outside  # look-around, a flag, a named or atomic group
            anchors = self.anchors
            i, size = self.alternation(start, depth + 1)
            if i >= len(p) or p[i] != ")":
                raise _Outside
            i += 1
            # Oniguruma refuses to repeat a group an anchor may be all of ("(^|a)*")
            repeatable = self.anchors == anchors
        elif c == "[":
            i = self.klass(i + 1)
        elif c == "\\":
            i = self.escape(i)
        elif c in _SPECIAL and c != ".":
            raise _Outside  # a repeat with nothing before it, a stray ] { }
        else:
            i += 1
        if i < len(p) and p[i] in "*+?{":
            if not repeatable:
                raise _Outside
            if p[i] == "{":
                i, count = self.interval(i + 1)
                size *= count
            else:
                i += 1
            if i < len(p) and p[i] in "*+?{":
                raise _Outside  # lazy, possessive or a repeat repeated
        return i, size

    def interval(self, i: int) -> tuple[int, int]:
        """After ``{``: ``n}``, ``n,}`` or ``n,m}`` with n ≤ m ≤ REPEAT_MAX; where it ends,
        and its largest count (``n,}`` unrolls to n and a loop: n + 1)."""
        p = self.p
        end = p.find("}", i)
        if end < 0:
            raise _Outside
        low, comma, high = p[i:end].partition(",")
        if not low.isdigit() or (high and not high.isdigit()) or (high and not comma):
            raise _Outside
        if int(low) > REPEAT_MAX or (high and not int(low) <= int(high) <= REPEAT_MAX):
            raise _Outside
        return end + 1, int(high) if high else int(low) + bool(comma)

    def escape(self, i: int) -> int:
        """At a backslash: past its escape, one of :data:`_ESCAPES` (a back-reference,
        ``\\s``, ``\\b``, ``\\A``, ``\\n``, ``\\x..`` are not proven alike)."""
        if self.p[i + 1 : i + 2] not in _ESCAPES:
            raise _Outside
        return i + 2

    def klass(self, i: int) -> int:
        """After ``[``: an optional ``^``, then characters, ranges and escapes up to ``]``
        (no ``]`` first, no ``[`` inside, no ``&&``: each engine reads those its own way)."""
        p = self.p
        if i < len(p) and p[i] == "^":
            i += 1
        first = i
        while i < len(p) and p[i] != "]":
            c = p[i]
            if c == "[" or p.startswith("&&", i):
                raise _Outside
            if c == "\\":
                i = self.escape(i)
            elif p[i + 1 : i + 2] == "-" and p[i + 2 : i + 3] not in ("", "]"):
                high = p[i + 2]
                if c == "-" or high in "\\[]-" or ord(high) < ord(c):
                    raise _Outside  # a range of a dash, an escape or backwards
                i += 3
            elif c == "-" and i != first and p[i + 1 : i + 2] != "]":
                raise _Outside  # a dash that is not at an end, nor in a range
            else:
                i += 1
                continue
            if p[i : i + 1] == "-" and p[i + 1 : i + 2] != "]":
                raise _Outside  # a range from an escape, or from a range's end
        if i >= len(p) or i == first:
            raise _Outside  # no closing ], or an empty class
        return i + 1
