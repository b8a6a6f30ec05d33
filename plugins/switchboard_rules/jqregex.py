"""``test("regex")`` decided in the server: a regular subset, matched by RE2 in linear time.

jq's ``test`` runs Oniguruma. Whether a pattern matches somewhere in a string is a fact of
the regular language the pattern denotes, not of the engine, for patterns with no
back-references, look-around, possessive or lazy repeats, flags or engine-specific classes;
and the classes and anchors mean the same in every engine on text with no newline and no
other control character. So for such a pattern (:func:`in_subset`) and such a string
(printable ASCII, at most ``SCAN_MAX`` characters), RE2's answer is jq's; for any other
string the filter defers to the sandbox. RE2 never backtracks: a tenant's pattern costs
time linear in the string (``(a*)*b`` on 1,024 characters: ~65 µs), where Python's ``re``
could take years, so no pattern here can stall a worker. Without the ``google-re2`` wheel
on this platform ``test`` is simply left to the sandbox.
"""

from __future__ import annotations

from typing import Any

from .jqfilters import SCAN_MAX, Defer, Evaluate

try:
    import re2
except ImportError:  # pragma: no cover - no wheel for this platform: the sandbox decides
    re2 = None

#: The longest pattern decided here (its RE2 program is compiled once per rule set).
PATTERN_MAX = 256
#: The largest count of a ``{n,m}`` repeat here (RE2 refuses past 1,000).
REPEAT_MAX = 100
#: Groups nested deeper than this are left to the sandbox (each is a Python call here).
GROUPS_MAX = 16

#: Characters that mean something to a regex: a literal one is written escaped.
_SPECIAL = frozenset(".^$|()[]{}*+?\\")
#: What a backslash may escape, outside a class and in one: punctuation, read literally.
_ESCAPED = frozenset(".^$|()[]{}*+?\\/-")
#: The class escapes whose ASCII meaning every engine shares (``\s`` is not one: RE2's
#: lacks the vertical tab, Python's has four more controls).
_CLASSES = frozenset("dDwW")


class _Outside(Exception):
    """The pattern is outside the subset."""


def jq_test(pattern: str) -> Evaluate | None:
    """The filter ``test(pattern)``, or None when the pattern is outside the subset (the
    rule set then goes to the sandbox, which also names a pattern that does not compile)."""
    if re2 is None or not in_subset(pattern):
        return None
    options = re2.Options()
    options.log_errors = False  # a refusal is ours to handle, not a line on stderr
    options.never_capture = True
    try:
        search = re2.compile(pattern, options).search
    except Exception:  # too large a program for RE2's memory bound: the sandbox's
        return None

    def test(v: Any) -> bool:
        # of anything but a string, jq's error; of a string with a control character or
        # past ASCII, an answer this subset does not prove: both the sandbox's
        if type(v) is not str or len(v) > SCAN_MAX or not (v.isascii() and v.isprintable()):
            raise Defer
        return search(v) is not None

    return test


def in_subset(pattern: str) -> bool:
    """Whether ``pattern`` is of the regular subset every engine reads alike: printable
    ASCII; literals, ``.``, ``^``, ``$``, classes ``[...]`` of characters and ranges (and
    ``\\d``, ``\\w``), groups ``(...)`` and ``(?:...)``, ``|``, and one greedy repeat
    (``*``, ``+``, ``?``, ``{n}``, ``{n,}``, ``{n,m}``) after an atom."""
    if len(pattern) > PATTERN_MAX or not (pattern.isascii() and pattern.isprintable()):
        return False
    try:
        return _Scan(pattern).alternation(0, 0) == len(pattern)
    except _Outside:
        return False


class _Scan:
    """A recursive-descent reading of a pattern that only says where each part ends."""

    def __init__(self, pattern: str) -> None:
        self.p = pattern
        self.anchors = 0  # ^ and $ read so far

    def alternation(self, i: int, depth: int) -> int:
        i = self.sequence(i, depth)
        while i < len(self.p) and self.p[i] == "|":
            i = self.sequence(i + 1, depth)
        return i

    def sequence(self, i: int, depth: int) -> int:
        while i < len(self.p) and self.p[i] not in "|)":
            i = self.piece(i, depth)
        return i

    def piece(self, i: int, depth: int) -> int:
        p, c = self.p, self.p[i]
        repeatable = True
        if c in "^$":
            i, repeatable = i + 1, False
            self.anchors += 1
        elif c == "(":
            if depth >= GROUPS_MAX:
                raise _Outside
            start = i + 3 if p.startswith("(?:", i) else i + 1
            if p.startswith("(?", i) and start == i + 1:
                raise _Outside  # look-around, a flag, a named or atomic group
            anchors = self.anchors
            i = self.alternation(start, depth + 1)
            if i >= len(p) or p[i] != ")":
                raise _Outside
            i += 1
            # Oniguruma refuses to repeat a group an anchor may be all of ("(^|a)*")
            repeatable = self.anchors == anchors
        elif c == "[":
            i = self.klass(i + 1)
        elif c == "\\":
            if i + 1 >= len(p) or (p[i + 1] not in _ESCAPED and p[i + 1] not in _CLASSES):
                raise _Outside  # a back-reference, \s, \b, \A, \n, \x..: not proven alike
            i += 2
        elif c in _SPECIAL and c != ".":
            raise _Outside  # a repeat with nothing before it, a stray ] { }
        else:
            i += 1
        if i < len(p) and p[i] in "*+?{":
            if not repeatable:
                raise _Outside
            i = self.interval(i + 1) if p[i] == "{" else i + 1
            if i < len(p) and p[i] in "*+?{":
                raise _Outside  # lazy, possessive or a repeat repeated
        return i

    def interval(self, i: int) -> int:
        """After ``{``: ``n}``, ``n,}`` or ``n,m}`` with n ≤ m ≤ REPEAT_MAX."""
        p = self.p
        end = p.find("}", i)
        if end < 0:
            raise _Outside
        low, comma, high = p[i:end].partition(",")
        if not low.isdigit() or (high and not high.isdigit()) or (high and not comma):
            raise _Outside
        if int(low) > REPEAT_MAX or (high and not int(low) <= int(high) <= REPEAT_MAX):
            raise _Outside
        return end + 1

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
                if i + 1 >= len(p) or (p[i + 1] not in _ESCAPED and p[i + 1] not in _CLASSES):
                    raise _Outside
                i += 2
                if i < len(p) and p[i] == "-" and p[i + 1 : i + 2] != "]":
                    raise _Outside  # a range from a class or an escape
                continue
            if c == "-" and i != first and p[i + 1 : i + 2] != "]":
                raise _Outside  # a dash that is not at an end, nor in a range
            if p[i + 1 : i + 2] == "-" and p[i + 2 : i + 3] not in ("", "]"):
                high = p[i + 2]
                if c == "-" or high in "\\[]-" or ord(high) < ord(c):
                    raise _Outside  # a range of a dash, an escape or backwards
                i += 3
                if i < len(p) and p[i] == "-" and p[i + 1 : i + 2] != "]":
                    raise _Outside
                continue
            i += 1
        if i >= len(p) or i == first:
            raise _Outside  # no closing ], or an empty class
        return i + 1
