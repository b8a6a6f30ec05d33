"""The envelope routing rules see: switchboard facts on top, producer data underneath."""

from __future__ import annotations

import copy
import json
import logging
import re
import sys
from collections.abc import Callable
from typing import Any

import orjson

from ..pgtext import clean_json, clean_text
from ..registry import ProjectionRegistry

log = logging.getLogger(__name__)

_FLOAT_MAX = sys.float_info.max


class _NotJSON(ValueError):
    """Raised while decoding for text that is not strict JSON (NaN, Infinity)."""


def _reject_constant(name: str) -> Any:
    # Python's json accepts NaN/Infinity/-Infinity, which no other JSON tool (jq included)
    # would; a payload using them is not JSON.
    raise _NotJSON(name)


def _parse_float(text: str) -> float:
    # 1e400 overflows to inf, which cannot be written back out as JSON; clamp it to the
    # largest double the way jq does, so the envelope always serializes.
    value = float(text)
    if value == float("inf"):
        return _FLOAT_MAX
    if value == float("-inf"):
        return -_FLOAT_MAX
    return value


def _parse_int(text: str) -> int | float:
    # Integers stay exact; only a number too long for int() becomes a (clamped) float.
    # Python refuses int() on digit strings past its limit (CVE-2020-10735; 0 = no limit).
    limit = sys.get_int_max_str_digits()
    digits = len(text) - (text[0] == "-")
    return int(text) if limit == 0 or digits <= limit else _parse_float(text)


#: Arrays and objects nested deeper than this are not parsed (the payload is null). Fixed,
#: so every Python agrees: 3.11 and 3.12 stop decoding near their recursion limit, 3.13
#: decodes far deeper, and everything after the parse (cleaning, the sandbox's jq, jsonb)
#: walks the value again.
MAX_DEPTH = 512


def deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` has arrays or objects nested more than ``limit`` deep (walked
    without recursion: the value may be nested past any recursion limit)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            if depth > limit:
                return True
            stack.extend((child, depth + 1) for child in item)
    return False


#: A UTF-8 byte order mark: one leading it is dropped before parsing (jq reads past it too).
_BOM = b"\xef\xbb\xbf"
#: Every ASCII digit to ``0``, ``.`` to itself, ``e``/``E`` to ``e``, a sign to ``+`` and
#: an opening bracket of either kind to ``[`` and every other byte to a space: a digit run long enough to leave 64 bits shows as
#: :data:`_LONG_RUN` in the translation, and a float's text as one of :data:`_FLOAT_MARKS`.
#: A translate and a substring search cost ~3 us on a 5 KB body, where
#: ``re.search(b"[0-9]{19}")`` costs ~45 us.
_CLASSES = bytes(
    0x30 if 0x30 <= byte <= 0x39
    else byte if byte == 0x2E
    else 0x65 if byte in b"eE"
    else 0x2B if byte in b"+-"
    else 0x5B if byte in b"[{"
    else 0x20
    for byte in range(256)
)  # fmt: skip
#: What every float's text holds (a digit, then ``.`` or an exponent, then a digit or sign).
_FLOAT_MARKS = (b"0.0", b"0e0", b"0e+")
#: An integer of 18 digits or fewer fits a signed 64-bit integer, which orjson keeps exact;
#: past 64 bits it makes a float, where the json path keeps the integer.
_LONG_RUN = b"0" * 19
#: What :func:`_parse_fast` returns when it leaves the body to the json path.
_SLOW: Any = object()


def parse_payload(body: bytes) -> Any:
    """The body as exactly one strict JSON value, else None.

    None for invalid UTF-8, an empty or whitespace-only body, trailing data after the
    first value, NaN/Infinity literals, and nesting deeper than :data:`MAX_DEPTH`. One
    leading UTF-8 byte order mark is dropped first.
    """
    body = _without_bom(body)
    value = _parse_fast(body)
    return _parse_json(body, None) if value is _SLOW else value


def _without_bom(body: bytes) -> bytes:
    return body[len(_BOM) :] if body.startswith(_BOM) else body


def _parse_fast(body: bytes, classes: bytes | None = None) -> Any:
    """:func:`_parse_json` by orjson (half its time on a 5 KB body), else :data:`_SLOW`.

    Only where orjson reads exactly what the json path does: a body holding a digit run
    that may be an integer past 64 bits goes the slow way, and so does every body orjson
    refuses (among them invalid ones, which the json path then refuses too, a lone surrogate
    and a number past the largest double, which the json path accepts, and nesting past
    orjson's own limit).
    """
    if classes is None:
        classes = body.translate(_CLASSES)
    if _LONG_RUN in classes:
        return _SLOW
    try:
        value = orjson.loads(body)
    except Exception:
        # orjson.JSONDecodeError, or RecursionError from 3.9 on deep nesting: the json path
        # decides each for itself.
        return _SLOW
    return _within_depth(body, value, classes)


def _parse_json(body: bytes, floats: list[str] | None) -> Any:
    """:func:`parse_payload` by the standard library's json (the reference
    :func:`_parse_fast` must agree with), telling ``floats`` of every non-integer number it
    read; ``body`` without its BOM."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if not text.strip():
        return None
    limit = sys.get_int_max_str_digits()
    # int() needs the guard only for a digit run past its limit: most bodies have none, and
    # then every integer is parsed by json itself rather than a Python call each
    guard = limit != 0 and len(body) > limit and re.search(b"[0-9]{%d}" % limit, body)
    if guard and floats is not None:
        floats.append("")  # integers that may become floats: never the same text
    parse_float: Callable[[str], float] = _parse_float
    if floats is not None:

        def seen(number: str) -> float:
            floats.append(number)
            return _parse_float(number)

        parse_float = seen
    try:
        value = json.loads(
            text,
            parse_float=parse_float,
            parse_int=_parse_int if guard else None,
            parse_constant=_reject_constant,
        )
    except (ValueError, RecursionError):
        return None
    return _within_depth(body, value)


def _within_depth(body: bytes, value: Any, classes: bytes | None = None) -> Any:
    """``value``, or None when it nests deeper than :data:`MAX_DEPTH` (``classes``: the
    body's :data:`_CLASSES` translation, when there is one)."""
    # Every level of nesting opens with its own bracket: a body with no more brackets than
    # the limit (in strings or not) cannot be deeper, and needs no walk (most bodies).
    opened = body.count(b"[") + body.count(b"{") if classes is None else classes.count(b"[")
    if opened <= MAX_DEPTH:
        return value
    return None if deeper_than(value, MAX_DEPTH) else value


#: What can put NUL or a lone surrogate into a parsed body: a JSON escape (a strict UTF-8
#: decode refuses encoded surrogates and the strict JSON parser raw control characters).
#: An escaped backslash before ``u`` may match too: that only costs a needless clean.
_UNCLEAN_ESCAPE = re.compile(rb"\\u(?:0000|[dD][89abcdefABCDEF][0-9a-fA-F]{2})")
#: A ``-0`` (which a parser reads as the integer 0, and would write back as ``0``); in a
#: string too, where it only costs the text's use.
_MINUS_ZERO = re.compile(rb"-0(?![0-9])")


def clean_payload(body: bytes) -> Any:
    """``clean_json(parse_payload(body))``, without walking a body that cannot need it."""
    value = parse_payload(body)
    return clean_json(value) if _UNCLEAN_ESCAPE.search(body) else value


def payload_and_text(body: bytes) -> tuple[Any, bytes | None]:
    """:func:`clean_payload`, and the body as JSON text that reads as exactly that value.

    The text (None when not proven) is the body itself, its newlines (whitespace in a valid
    JSON text: a strict parse refuses them raw in strings) made spaces: given only when the
    body parsed, needed no cleaning, and holds no number whose text a parser would write
    back differently (a float, a ``-0``, an integer past Python's digit limit). Then any
    JSON reader (jq in the rules sandbox) reads from it what it would read from the value
    written out again, key order and duplicate keys (the last value, at the first's place)
    included, without paying for writing it out.
    """
    body = _without_bom(body)  # the text spliced into an envelope must not hold it
    classes = body.translate(_CLASSES)
    value = _parse_fast(body, classes)
    if value is not _SLOW:
        # orjson read it as the json path would; a float in the value is a float's text in
        # the body (orjson makes one of no integer it takes: longer digit runs went slow).
        # Most bodies show no float's marks at all, and need no walk.
        has_floats = any(m in classes for m in _FLOAT_MARKS) and _has_float(value)
    else:
        floats: list[str] = []
        value = _parse_json(body, floats)
        has_floats = bool(floats)
    if _UNCLEAN_ESCAPE.search(body):
        return clean_json(value), None
    if value is None or has_floats or _MINUS_ZERO.search(body):
        return value, None
    return value, body.replace(b"\n", b" ")


def _has_float(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float):
            return True
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


class Envelope(dict[str, Any]):
    """An envelope that also holds ``payload_json``: its payload's JSON text, when proven
    (:func:`payload_and_text`), so that writing the envelope out need not write the payload.

    Only stored deliveries rebuilt for dry runs carry it (their envelopes are read, never
    changed); a copy (``dict(envelope)``) is a plain envelope again.
    """

    __slots__ = ("payload_json",)

    def __init__(self, doc: dict[str, Any], payload_json: bytes | None) -> None:
        super().__init__(doc)
        self.payload_json = payload_json


def _project(
    projection: Any, source: str, kind: str | None, payload: Any, headers: dict[str, str]
) -> Any:
    try:
        if getattr(projection, "headers", False):
            built = projection.build(source, kind, payload, headers=dict(headers))
        else:
            built = projection.build(source, kind, payload)
    except Exception:
        # A plugin's projection bug must not fail every delivery from its source; the key
        # reads null and the log names the projection.
        log.exception("projection %r for source %r failed", projection.name, source)
        return None
    if not isinstance(built, dict):
        return None
    # A deep copy so the projection never shares structure with .payload: rules and the
    # stored envelope see independent values whatever the builder returned.
    return {key: clean_json(copy.deepcopy(built.get(key))) for key in projection.keys}


def build_envelope(
    *,
    source: str,
    kind: str | None,
    webhook_id: str,
    trust_mode: str,
    verified: bool,
    content_type: str | None,
    headers: dict[str, str],
    body: bytes,
    projections: ProjectionRegistry,
    keep_text: bool = False,
) -> dict[str, Any]:
    """The envelope of one delivery; pure, so a dry-run over a stored event sees what it saw.

    ``headers`` must already be sanitized (:func:`switchboard.sanitize.sanitize_headers`),
    exactly as persisted. Every projection key of ``projections`` is present, null when no
    projection applies to ``source`` or its builder returns None.

    Every producer string (kind, content type, headers, payload) is made storable by
    :mod:`switchboard.pgtext` here, once for every caller: the envelope is what is
    persisted, and cleaning is idempotent, so the stored delivery replays identically.
    """
    text = None
    if keep_text:
        payload, text = payload_and_text(body)
    else:
        payload = clean_payload(body)
    envelope: dict[str, Any] = {
        "source": source,
        "kind": None if kind is None else clean_text(kind),
        "webhook_id": webhook_id,
        "trust_mode": trust_mode,
        "verified": verified,
        "content_type": None if content_type is None else clean_text(content_type),
        "size": len(body),
        "headers": clean_json(dict(headers)),
        "payload": payload,
    }
    for name in projections.envelope_keys():
        if name in envelope:
            # A projection never overrides a switchboard fact (.verified, .source ...).
            continue
        projection = projections.get(f"{name}:{source}")
        envelope[name] = (
            None
            if projection is None
            else _project(projection, source, envelope["kind"], payload, envelope["headers"])
        )
    return Envelope(envelope, text) if keep_text else envelope
