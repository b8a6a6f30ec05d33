"""jq's filters as the server decides them (direct.py): jq's answer on what an envelope
holds, or :class:`Defer` where jq raises an error or its answer is not proven alike here.

Each costs a constant, or at most the length of a literal of the rule's own 4 KiB; a
string is copied (its case changed) or searched (``contains``) only up to :data:`SCAN_MAX`
characters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: Integers jq and Python compare alike (a double holds each exactly).
SAFE = 2**53

#: One compiled expression: the envelope in, jq's one output out (or :class:`Defer`).
Evaluate = Callable[[Any], Any]


class Defer(Exception):
    """This envelope's answer is the sandbox's to give (an error, or a value not proven here)."""


def truthy(v: Any) -> bool:
    """jq's truth: anything but null and false."""
    return not (v is None or v is False)


def _not(v: Any) -> bool:
    return not truthy(v)


def _length(v: Any) -> int:
    # jq: a string's code points, an array's or object's members, null 0, a number's
    # absolute value (a float's is left to jq), a boolean an error
    kind = type(v)
    if kind is str or kind is list or kind is dict:
        return len(v)
    if v is None:
        return 0
    if kind is int and -SAFE <= v <= SAFE:
        return abs(v)
    raise Defer


#: jq's name of each kind of value an envelope holds (a float is a number too).
_TYPES = {type(None): "null", bool: "boolean", int: "number", float: "number", str: "string",
          list: "array", dict: "object"}  # fmt: skip


def _type(v: Any) -> str:
    name = _TYPES.get(type(v))
    if name is None:
        raise Defer  # nothing an envelope holds, but a subclass is jq's to name
    return name


def _contains(literal: str) -> Evaluate:
    # of a string, whether the literal is in it (jq 1.7 searches the bytes); of anything
    # else, jq's error or its containment of kinds, left to jq
    def contains(v: Any) -> bool:
        if type(v) is not str or len(v) > SCAN_MAX:
            raise Defer
        return literal in v

    return contains


def _has(key: str) -> Evaluate:
    # whether an object has the key (of an array, a string key is jq's error)
    def has(v: Any) -> bool:
        if type(v) is not dict:
            raise Defer
        return key in v

    return has


_DOWN = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_UP = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")


#: The longest string copied (its case changed) or searched (``contains``) here: either
#: costs its length, so a longer one goes to the sandbox, whose budget charges it to its
#: owner (a comparison or an affix costs a memcmp at most, bounded by the literal or cheap
#: enough at any length).
SCAN_MAX = 1024


def _case(table: dict[int, int]) -> Evaluate:
    # jq changes the ASCII letters only, and raises an error for anything but a string
    def change(v: Any) -> str:
        if type(v) is not str or len(v) > SCAN_MAX:
            raise Defer
        return v.translate(table)

    return change


#: Filters of no argument, on their input.
FILTERS: dict[str, Evaluate] = {
    "not": _not,
    "length": _length,
    "type": _type,
    "ascii_downcase": _case(_DOWN),
    "ascii_upcase": _case(_UP),
}


def _affix(test: Callable[[str, str], bool]) -> Callable[[str], Evaluate]:
    """``startswith`` / ``endswith`` of a literal: jq compares UTF-8 bytes, which for text
    without lone surrogates (an envelope has none, a literal here neither) is a comparison
    of code points; anything but a string input is jq's error."""

    def of(literal: str) -> Evaluate:
        def affix(v: Any) -> bool:
            if type(v) is not str:
                raise Defer
            return test(v, literal)

        return affix

    return of


#: Filters of one string literal, by name: each makes the filter of that literal.
OF_A_STRING: dict[str, Callable[[str], Evaluate]] = {
    "startswith": _affix(str.startswith),
    "endswith": _affix(str.endswith),
    "has": _has,
    "contains": _contains,
}
