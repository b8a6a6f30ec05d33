"""The one walk of a JSON value: document order, paths on demand, any depth in linear work."""

from __future__ import annotations

import math
from typing import Any

from switchboard.configcheck import non_finite
from switchboard.jsonwalk import dotted, path_of, walk
from switchboard.pgtext import unstorable


def test_items_come_in_document_order_with_their_paths() -> None:
    doc = {"a": [1, {"b": "x"}], "c": None}
    seen = [(path_of(place), item) for place, item in walk(doc)]
    assert seen == [
        ((), doc),
        (("a",), [1, {"b": "x"}]),
        (("a", 0), 1),
        (("a", 1), {"b": "x"}),
        (("a", 1, "b"), "x"),
        (("c",), None),
    ]
    place = [p for p, item in walk(doc) if item == "x"][0]
    assert dotted("result", place) == "result.a[1].b"
    assert dotted("result", None) == "result"


def _nested(depth: int, bottom: Any) -> Any:
    value = bottom
    for i in range(depth):
        value = {"k": value} if i % 2 else [value]
    return value


def test_a_value_nested_far_past_the_recursion_limit_is_walked_in_linear_work() -> None:
    # A path built per item (a tuple or a string) costs the square of the depth (a tuple
    # per item took 24 s here at this depth); linked paths cost one link an item.
    depth = 100_000
    path = non_finite(_nested(depth, math.nan))
    assert path is not None and len(path) == depth
    assert path[:4] == ("k", 0, "k", 0)
    problem = unstorable(_nested(depth, "a\x00"), "result")
    assert problem is not None
    assert problem.startswith("a string at result.k[0].k[0]") and "contains NUL" in problem
    assert unstorable(_nested(depth, "fine"), "result") is None
