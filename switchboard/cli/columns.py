"""Column plans: how a list table fits the terminal it is drawn on.

A plan is an ordered list of :class:`Col`. At draw time (:class:`PlannedTable`, a rich
renderable, so the width is the console's own) a table:

1. leaves out each low-value column (``drop_below``) on a console narrower than its width
   (the stated order: the highest ``drop_below`` goes first);
2. shortens ids to an ``ID_PREFIX``-character prefix, then times to ``MM-DD HH:MM:SS``,
   while the whole table would not fit at its natural width (``--json`` keeps them whole);
3. if the columns' floors still do not fit, leaves out further low-value columns, then the
   rightmost key column, until they do;
4. gives every column its floor (a key column's ``min_width``, never less than its header,
   else its header), then shares what is left out fairly up to each column's natural width.

Every column is ``no_wrap`` with ``overflow="ellipsis"``: one row is one line, and a value
too long for its column ends in "…" instead of breaking mid-word. A column with ``wrap``
(free text in a detail table) wraps at spaces instead.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, JustifyMethod, RenderResult
    from rich.text import Text

#: How many characters of an id a narrow table shows (a UUID's first group).
ID_PREFIX = 8


@dataclass(frozen=True)
class Col:
    """One column of a planned table.

    ``min_width``: a key column's floor (raised to its header's width). ``drop_below``: a
    low-value column, left out on a console narrower than this. ``kind``: ``"id"`` (shown
    as a prefix on a narrow table), ``"time"`` (an RFC 3339 string, shown as date and time)
    or ``"text"``.
    """

    header: str
    get: Callable[[dict[str, Any]], Any]
    min_width: int | None = None
    drop_below: int = 0
    kind: str = "text"
    wrap: bool = False
    justify: JustifyMethod = "left"

    @property
    def key(self) -> bool:
        return self.drop_below == 0

    def floor(self) -> int:
        """The narrowest this column is drawn (while its values are not narrower)."""
        shortened = {"id": ID_PREFIX + 1, "time": len("12-03 12:30:05")}.get(self.kind, 0)
        return max(self.min_width or 0, len(self.header), shortened)


def show_time(value: Any, *, compact: bool) -> Any:
    """``2026-12-03T12:30:05.123Z`` as ``2026-12-03 12:30:05Z`` (``compact``: ``12-03 12:30:05``)."""
    if not isinstance(value, str):
        return value
    try:
        when = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return value
    if compact:
        return when.strftime("%m-%d %H:%M:%S")
    utc = when.utcoffset() == dt.timedelta(0)
    return when.strftime("%Y-%m-%d %H:%M:%S") + ("Z" if utc else when.strftime("%z"))


def show_id(value: Any, *, compact: bool) -> Any:
    if compact and isinstance(value, str) and len(value) > ID_PREFIX + 1:
        return value[:ID_PREFIX] + "…"
    return value


def _overhead(n: int) -> int:
    # rich's default box: an edge each side, a rule between columns, one space of padding
    # each side of every cell.
    return 3 * n + 1 if n else 0


def _share(floors: list[int], naturals: list[int], room: int) -> list[int]:
    """Floors, then ``room`` shared out fairly (the smallest want is met first)."""
    widths = list(floors)
    spare = room - sum(floors)
    wanting = sorted(
        (i for i in range(len(widths)) if naturals[i] > widths[i]),
        key=lambda i: naturals[i] - widths[i],
    )
    for k, i in enumerate(wanting):
        give = min(naturals[i] - widths[i], max(spare, 0) // (len(wanting) - k))
        widths[i] += give
        spare -= give
    return widths


class PlannedTable:
    """A table drawn to fit the console's width by its column plan (see the module)."""

    def __init__(
        self,
        title: Text | None,
        plan: Sequence[Col],
        rows: Iterable[dict[str, Any]],
        cell: Callable[[Any], Text],
    ) -> None:
        self.title, self.plan, self.rows, self.cell = title, list(plan), list(rows), cell

    def cells(self, cols: Sequence[Col], compact: int) -> list[list[Text]]:
        """Each row's cells: ``compact`` 1 shortens ids, 2 ids and times."""
        out = []
        for row in self.rows:
            line = []
            for col in cols:
                value = col.get(row)
                if col.kind == "id":
                    value = show_id(value, compact=compact >= 1)
                elif col.kind == "time":
                    value = show_time(value, compact=compact >= 2)
                line.append(self.cell(value))
            out.append(line)
        return out

    def layout(self, width: int) -> tuple[list[Col], list[list[Text]], list[int], int]:
        """The columns shown at ``width``, their cells, their widths and whether compact."""
        cols = [c for c in self.plan if width >= c.drop_below]

        def naturals(cells: list[list[Text]]) -> list[int]:
            return [
                max([len(c.header), *(line[i].cell_len for line in cells)])
                for i, c in enumerate(cols)
            ]

        compact = 0
        cells = self.cells(cols, compact)
        while compact < 2 and sum(naturals(cells)) + _overhead(len(cols)) > width:
            compact += 1
            cells = self.cells(cols, compact)
        while (
            len(cols) > 1
            and sum(min(c.floor(), n) for c, n in zip(cols, naturals(cells), strict=True))
            + _overhead(len(cols))
            > width
        ):
            low = [c for c in cols if not c.key]
            # the low-value column that goes first (highest drop_below), else the last key one
            gone = max(low, key=lambda c: c.drop_below) if low else cols[-1]
            keep = [i for i, c in enumerate(cols) if c is not gone]
            cols = [cols[i] for i in keep]
            cells = [[line[i] for i in keep] for line in cells]
        nat = naturals(cells)
        floors = [min(c.floor(), n) for c, n in zip(cols, nat, strict=True)]
        widths = _share(floors, nat, width - _overhead(len(cols)))
        return cols, cells, widths, compact

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from rich.table import Table

        cols, cells, widths, compact = self.layout(options.max_width)
        hidden = [c.header for c in self.plan if c not in cols]
        kinds = {c.kind for c in cols}
        short = [
            what
            for what, kind, level in (("ids", "id", 1), ("times", "time", 2))
            if kind in kinds and compact >= level
        ]
        notes = [" and ".join(short) + " shortened" if short else ""]
        if hidden:
            notes.append("hidden: " + ", ".join(hidden))
        note = "; ".join(n for n in notes if n)
        caption = self.cell(f"(--json has all: {note})") if note else None
        table = Table(
            title=self.title, title_justify="left", caption=caption, caption_justify="left"
        )
        for col, w in zip(cols, widths, strict=True):
            table.add_column(
                col.header,
                width=w,
                min_width=min(col.floor(), w),
                no_wrap=not col.wrap,
                overflow="ellipsis",
                justify=col.justify,
            )
        for line in cells:
            table.add_row(*line)
        yield table
