"""Small helpers every service module shares: argument checks and JSON-ready rows."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any, Iterable

from ..errors import InvalidArgument, clip
from ..pgtext import unstorable

QUEUE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")
NAME_MAX = 128


def check_storable(value: Any, field: str) -> Any:
    """``value``, or InvalidArgument naming ``field`` when PostgreSQL could not store it."""
    problem = unstorable(value, field)
    if problem is not None:
        raise InvalidArgument(f"{field}: {problem}")
    return value


def check_queue(value: object, field: str) -> str:
    if not isinstance(value, str) or not QUEUE_RE.match(value):
        raise InvalidArgument(
            f"{field}: queue names are 1-64 characters of letters, digits, '_', '.', ':', '-'"
            f" (got {clip(repr(value))})"
        )
    return value


def check_queues(values: Iterable[object], field: str) -> list[str]:
    out = [check_queue(v, field) for v in values]
    return list(dict.fromkeys(out))


def check_name(value: object, field: str) -> str:
    """A human's or an endpoint's name (to make, or to look one up by: a name that could
    not be stored names no one)."""
    if isinstance(value, str):
        check_storable(value, field)  # first: encoding a surrogate to measure it raises
    if not isinstance(value, str) or not value.strip() or len(value.encode()) > NAME_MAX:
        raise InvalidArgument(f"{field}: must be a non-empty string of at most {NAME_MAX} bytes")
    return value


def jsonable(value: Any) -> Any:
    """Rows to JSON-ready data: datetimes as RFC 3339 UTC, bytes dropped."""
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items() if not isinstance(v, bytes | memoryview)}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
    return value
