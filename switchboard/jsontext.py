"""JSON text out, fast: orjson where it writes what ``json`` would mean, ``json`` where it cannot."""

from __future__ import annotations

import json
from typing import Any

import orjson

# orjson refuses some of what the standard library writes (integers past 64 bits, lone
# surrogates, non-string keys, subclasses of str/int/dict/list such as enums): for those
# the slow path writes the text every caller wrote before. Everything else is the same
# document, in about a tenth of the time (a delivery's batch row, trace and payload are
# dumped on the hot path).
_STRICT = orjson.OPT_PASSTHROUGH_SUBCLASS


def dumps_bytes(value: Any) -> bytes:
    """``value`` as UTF-8 JSON: psycopg's ``Jsonb`` dumper (its default is ``json.dumps``)."""
    try:
        return orjson.dumps(value, option=_STRICT)
    except (TypeError, orjson.JSONEncodeError):
        return json.dumps(value).encode()


def dumps(value: Any) -> str:
    """``value`` as compact JSON text, like ``json.dumps(value, ensure_ascii=False)``."""
    try:
        return orjson.dumps(value, option=_STRICT).decode()
    except (TypeError, orjson.JSONEncodeError):
        return json.dumps(value, ensure_ascii=False)


def sorted_key(value: Any) -> str | None:
    """A canonical text of ``value`` (keys sorted) to cache by, or None if it has none."""
    try:
        return orjson.dumps(value, option=_STRICT | orjson.OPT_SORT_KEYS).decode()
    except (TypeError, orjson.JSONEncodeError):
        try:
            return json.dumps(value, sort_keys=True, separators=(",", ":"))
        except (TypeError, ValueError):
            return None


def dumps_default_str(value: Any) -> str:
    """``json.dumps(value, default=str, ensure_ascii=False)``: a log line's fields."""
    try:
        return orjson.dumps(value, default=str, option=orjson.OPT_PASSTHROUGH_DATETIME).decode()
    except (TypeError, orjson.JSONEncodeError):
        return json.dumps(value, default=str, ensure_ascii=False)
