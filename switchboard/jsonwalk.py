"""Walking a JSON value without recursion, each item's path built only when asked for."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

#: Where an item is: its container's place and its key or index (None: the root).
Place = tuple["Place", str | int] | None


def walk(value: Any) -> Iterator[tuple[Place, Any]]:
    """Every item of ``value`` (the value itself first), in document order, with its place.

    An explicit stack: a caller's value may be nested past the recursion limit. A path is
    a chain of links, so a deep value costs no more than a wide one (a tuple or string per
    item would cost the square of the depth).
    """
    stack: list[tuple[Place, Any]] = [(None, value)]
    while stack:
        place, item = stack.pop()
        yield place, item
        if isinstance(item, Mapping):
            stack.extend(((place, k), v) for k, v in reversed(list(item.items())))
        elif isinstance(item, list | tuple):
            stack.extend(((place, i), v) for i, v in reversed(list(enumerate(item))))


def path_of(place: Place) -> tuple[str | int, ...]:
    """The keys and indexes from the root to ``place``."""
    parts: list[str | int] = []
    while place is not None:
        place, part = place
        parts.append(part)
    return tuple(reversed(parts))


def dotted(field: str, place: Place) -> str:
    """``place`` as a caller writes it under the name ``field``: ``result.a[0].b``."""
    return field + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path_of(place))
