"""The delivery line written straight to the handler is the line logging would write, and
is written that way only when logging would do nothing else with it."""

from __future__ import annotations

import io
import logging
import time
from typing import Any

import pytest

from switchboard.loghygiene import HygieneFilter
from switchboard.logsetup import JsonFormatter, TextFormatter, clean_fields, write_clean_info

FIELDS = {
    "webhook_id": "7f1c3a52-3b1e-4a57-9a3f-5b2c2b0c7a11",
    "event_id": None,
    "source": "generic",
    "kind": "push «redacted»",
    "status": 202,
    "disposition": "queued",
    "faults": [],
    "latency_ms": 3.2,
    "todos_created": 1,
    "message": "a field named like a key of the line: the line's own wins",
}


def _tree() -> tuple[logging.Logger, logging.StreamHandler[io.StringIO]]:
    """``switchboard.delivery`` in a hierarchy of its own, its root set up as ``configure``
    sets the real one up (one stream handler, JSON, the hygiene filter)."""
    root = logging.RootLogger(logging.INFO)
    manager = logging.Manager(root)
    handler = logging.StreamHandler(io.StringIO())
    handler.setFormatter(JsonFormatter())
    handler.addFilter(HygieneFilter())
    root.addHandler(handler)
    log = manager.getLogger("switchboard.delivery")
    return log, handler


def _by_logging(log: logging.Logger, msg: str, args: tuple[Any, ...]) -> None:
    log.handle(
        log.makeRecord(
            log.name, logging.INFO, __file__, 0, msg, args, None, "f", clean_fields(**FIELDS)
        )
    )


@pytest.fixture
def frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    """One instant for both ways of writing (a record reads time.time_ns or time.time)."""
    ns = 1_764_950_400_123_456_789
    monkeypatch.setattr(time, "time_ns", lambda: ns)
    monkeypatch.setattr(time, "time", lambda: ns / 1e9)


@pytest.mark.parametrize(
    "args",
    [(202, "queued"), (401, "unverified"), ("a token /webhooks/w/abcdef0123 in it", "x")],
)
def test_the_line_is_the_one_logging_writes(frozen: None, args: tuple[Any, ...]) -> None:
    log, handler = _tree()
    assert write_clean_info(log, "delivery %s %s", args, dict(FIELDS))
    fast = handler.stream.getvalue()
    handler.stream.seek(0)
    handler.stream.truncate()
    _by_logging(log, "delivery %s %s", args)
    assert fast == handler.stream.getvalue()
    assert fast.endswith("}\n") and fast.count("\n") == 1
    assert "abcdef0123" not in fast  # the message is redacted as the filter would


def _second_handler(log: logging.Logger, handler: logging.Handler) -> None:
    log.parent.addHandler(logging.StreamHandler(io.StringIO()))  # type: ignore[union-attr]


def _handler_on_the_way(log: logging.Logger, handler: logging.Handler) -> None:
    log.addHandler(logging.StreamHandler(io.StringIO()))


def _logger_filter(log: logging.Logger, handler: logging.Handler) -> None:
    log.addFilter(lambda record: True)


def _other_handler_filter(log: logging.Logger, handler: logging.Handler) -> None:
    handler.addFilter(lambda record: True)


def _text(log: logging.Logger, handler: logging.Handler) -> None:
    handler.setFormatter(TextFormatter())


def _warning_handler(log: logging.Logger, handler: logging.Handler) -> None:
    handler.setLevel(logging.WARNING)


def _no_filter(log: logging.Logger, handler: logging.Handler) -> None:
    handler.filters.clear()


def _file_handler(log: logging.Logger, handler: logging.Handler) -> None:
    root = log.parent
    assert root is not None
    root.removeHandler(handler)
    root.addHandler(logging.NullHandler())


@pytest.mark.parametrize(
    "change",
    [
        _second_handler,
        _handler_on_the_way,
        _logger_filter,
        _other_handler_filter,
        _text,
        _warning_handler,
        _no_filter,
        _file_handler,
    ],
)
def test_anything_else_on_the_way_leaves_the_line_to_logging(change: Any) -> None:
    log, handler = _tree()
    change(log, handler)
    assert not write_clean_info(log, "delivery %s %s", (202, "queued"), dict(FIELDS))
    assert handler.stream.getvalue() == ""


def test_a_stream_that_fails_leaves_the_line_to_logging() -> None:
    log, handler = _tree()

    class Broken(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError("stderr went away")

    handler.setStream(Broken())  # type: ignore[arg-type]
    assert not write_clean_info(log, "delivery %s %s", (202, "queued"), dict(FIELDS))
