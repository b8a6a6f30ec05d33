"""The window of a history call that also pages its changes (``changes_cursor``)."""

from __future__ import annotations

from typing import Any

from ..errors import InvalidArgument
from .replay import Window, window_of

#: The window of ``last`` when neither ``last`` nor ``since`` is given.
DEFAULT_LAST = 1000


def call_window(last: Any, since: Any, cursor: Any, changes_cursor: Any) -> Window:
    """The window a history call's arguments name (:func:`.replay.window_of`): a
    ``changes_cursor`` carries its window as a ``cursor`` does, and a bad one is refused
    under its own name (the caller passed no ``cursor``)."""
    if changes_cursor is None:
        return window_of(last, since, cursor, default_last=DEFAULT_LAST)
    try:
        return window_of(last, since, changes_cursor, default_last=DEFAULT_LAST)
    except InvalidArgument:
        # window_of reads only the cursor when one is given: this is about it
        raise InvalidArgument("changes_cursor: not a cursor this tool returned") from None
