"""How the read verbs print: a table on a terminal (``rich``), JSON for scripts.

A read verb prints JSON (what :func:`switchboard.cli.main.emit` writes) unless stdout is a
terminal; ``--json`` forces JSON and ``--table`` forces the table (on a pipe too, as plain
text, as wide as ``COLUMNS`` says, 80 otherwise). The tables show text exactly as stored:
never read as rich markup, control characters replaced.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from .main import emit, printable

if TYPE_CHECKING:  # rich is imported when a table is drawn, not by every command
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from .columns import Col, PlannedTable

#: (header, how to read the cell from one row)
Column = tuple[str, Callable[[dict[str, Any]], Any]]


def add_output_flags(p: argparse.ArgumentParser) -> None:
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--json", action="store_true", help="print JSON (the default when stdout is not a terminal)"
    )
    group.add_argument(
        "--table",
        action="store_true",
        help="print a table (the default on a terminal), on a pipe too",
    )


def bounded_int(low: int, high: int) -> Callable[[str], int]:
    """An argparse ``type``: an integer from ``low`` to ``high`` (the error names the range)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"must be an integer from {low} to {high} (got {text!r})"
            )
        return value

    return parse


def wants_table(args: argparse.Namespace) -> bool:
    if getattr(args, "json", False):
        return False
    if getattr(args, "table", False):
        return True
    return sys.stdout.isatty()


def console() -> Console:
    from rich.console import Console

    return Console(file=sys.stdout, highlight=False, soft_wrap=False)


def cell(value: Any, *, lines: bool = False) -> Text:
    """A value as plain text: never markup; None empty; lists and objects as compact JSON.

    Tabs and line breaks become spaces (``lines``: line breaks are kept), other control
    characters U+FFFD, so nothing stored can steer the terminal.
    """
    from rich.text import Text

    if value is None:
        return Text("")
    if isinstance(value, bool):
        return Text("yes" if value else "no")
    if not isinstance(value, str):
        value = (
            json.dumps(value, ensure_ascii=False, default=str)
            if isinstance(value, dict | list)
            else str(value)
        )
    return Text(
        printable(value, lambda c: " " if c in "\t\n\r" else "\ufffd", keep="\n" if lines else "")
    )


def heading(text: str) -> Text:
    out = cell(text)
    out.stylize("bold")
    return out


#: Headers that read as ids or times in a table given as plain (header, getter) pairs.
_ID_HEADERS = frozenset({"ID", "EVENT", "TODO", "WEBHOOK", "ENDPOINT ID"})
_TIME_HEADERS = frozenset({"RECEIVED", "CREATED", "UPDATED", "EXPIRES"})


def _col(column: Column | Col) -> Col:
    from .columns import Col

    if isinstance(column, Col):
        return column
    header, get = column
    if header in _ID_HEADERS:
        return Col(header, get, kind="id")
    if header in _TIME_HEADERS:
        return Col(header, get, kind="time")
    return Col(header, get, wrap=True)  # free text in a detail table wraps at spaces


def table(
    title: str | None, columns: Sequence[Column | Col], rows: Iterable[dict[str, Any]]
) -> PlannedTable:
    """A table that fits the console it is printed on, by its column plan (:mod:`.columns`).

    ``columns`` are :class:`~.columns.Col` (a list's plan) or plain ``(header, getter)``
    pairs (ids and times kept whole while they fit, other text wrapping at spaces).
    """
    from .columns import PlannedTable

    return PlannedTable(cell(title) if title else None, [_col(c) for c in columns], rows, cell)


def key_values(title: str, pairs: Iterable[tuple[str, Any]]) -> Table:
    from rich.table import Table

    out = Table(title=cell(title), title_justify="left", show_header=False)
    out.add_column("field", style="bold", no_wrap=True)
    out.add_column("value", overflow="fold")
    for key, value in pairs:
        out.add_row(key, cell(value))
    return out


def json_block(value: Any) -> Text:
    """A JSON value pretty-printed and highlighted, every character that is not printable
    written as its JSON escape: JSON escapes only C0 controls, and rich's own ``JSON``
    writes the rest (C1 controls, DEL, bidi overrides) raw, to steer the terminal."""
    from rich.highlighter import JSONHighlighter
    from rich.text import Text

    text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    return JSONHighlighter()(Text(printable(text, lambda c: json.dumps(c)[1:-1])))


def show(args: argparse.Namespace, doc: Any, render: Callable[[Console, Any], None]) -> None:
    """JSON for scripts, or ``render(console, doc)`` for a person."""
    if wants_table(args):
        render(console(), doc)
    else:
        emit(doc)
