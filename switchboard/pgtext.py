"""Producer text PostgreSQL can store: NUL and lone surrogates made explicit, never fatal.

PostgreSQL refuses two things every producer can send: the NUL character (in ``text``
and in ``jsonb``, even as the JSON escape ``\\u0000``) and strings that are not valid
UTF-8 (a JSON ``\\ud800`` decodes to a lone surrogate; a header byte such as ``\\xe9``
reaches us surrogate-escaped). The raw body and raw header bytes are stored as ``bytea``
and stay exact; what is stored as text or JSON, and what rules see, goes through here.

Two spellings, chosen per use:

* :func:`clean_json` / :func:`clean_text` for what people and rules read (envelope,
  headers, titles, kinds): each offending character becomes U+FFFD, the Unicode
  replacement character, as every WHATWG decoder does. Readable, not reversible.
* :func:`key_text` for identities (delivery ids, dedup keys): two different ids must
  stay different, so offending characters become reversible ``\\xNN`` escapes (and a
  backslash that could be read as one of them is doubled).

:func:`clean_text` and :func:`clean_json` are idempotent, so a dry-run over stored
(already clean) values rebuilds exactly the envelope the live delivery saw. :func:`key_text`
cannot be both idempotent and one-to-one (the text ``\\x00`` and a NUL would meet), and is
one-to-one: it is applied once, to what the producer sent.
"""

from __future__ import annotations

import re
from typing import Any

from .errors import clip
from .jsonwalk import dotted, walk

REPLACEMENT = "\ufffd"

# NUL, and any surrogate code point (a valid str never holds one outside surrogateescape
# decoding or a JSON "\udXXX" escape that was not part of a pair).
_BAD = re.compile("[\x00\ud800-\udfff]")
# What key_text rewrites: those, and a backslash an escape could be mistaken for (one
# followed by x, u, another backslash, or a character that is escaped itself).
_KEY = re.compile("\\\\(?=[xu\\\\\x00\ud800-\udfff])|[\x00\ud800-\udfff]")


def clean_text(value: str) -> str:
    """``value`` with NUL and lone surrogates replaced by U+FFFD."""
    return _BAD.sub(REPLACEMENT, value) if _BAD.search(value) else value


def clean_json(value: Any) -> Any:
    """A JSON value whose every string and key is :func:`clean_text`-clean.

    Keys that collide after cleaning keep the last value, as a JSON object with
    duplicate keys does. Containers are rebuilt; strings are shared when clean.
    """
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list):
        return [clean_json(v) for v in value]
    if isinstance(value, dict):
        return {clean_text(k) if isinstance(k, str) else k: clean_json(v) for k, v in value.items()}
    return value


def _escape(match: re.Match[str]) -> str:
    ch = match[0]
    if ch == "\\":
        return "\\\\"
    if ch == "\x00":
        return "\\x00"
    code = ord(ch)
    # surrogateescape maps raw byte 0xNN to U+DCNN: spell the byte; any other lone
    # surrogate (from a JSON escape) keeps its code point.
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def key_text(value: str) -> str:
    """``value`` with NUL and lone surrogates as ``\\xNN`` / ``\\uXXXX`` escapes, one-to-one.

    A backslash followed by ``x``, ``u``, a backslash or an escaped character is written
    ``\\\\``, so the text ``id-\\xff`` and the byte-carrying ``id-\xff`` stay two keys;
    every other key (all of them without such a backslash) is written as it was.
    """
    if "\\" not in value and not _BAD.search(value):
        return value
    return _KEY.sub(_escape, value)


def raw_bytes(value: str) -> bytes:
    """The bytes a surrogate-escaped header string was decoded from (exact).

    Sanic decodes header bytes as UTF-8 with ``surrogateescape``, so this round-trips
    every header as received; a surrogate no decoder could have produced is escaped.
    """
    if not _BAD.search(value):
        return value.encode()
    try:
        return value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return value.encode("utf-8", "backslashreplace")


def _bad_char(text: str) -> str | None:
    """The first character of ``text`` PostgreSQL cannot store in text or jsonb, named."""
    found = _BAD.search(text)
    if found is None:
        return None
    if found.group() == "\x00":
        return "NUL (U+0000)"
    # a surrogate: argv bytes that are not UTF-8 (surrogateescape), or a lone JSON \udXXX
    return f"U+{ord(found.group()):04X}, a lone surrogate (text that is not valid UTF-8)"


def unstorable(value: Any, field: str) -> str | None:
    """Why PostgreSQL would refuse a caller's ``value`` (a string, or a JSON value: any
    string or key in it), in the caller's terms under the name ``field``; None when it can
    be stored. For what a caller names or writes (a note, a result), which is refused
    rather than cleaned: a producer's text is :func:`clean_text`-ed instead."""
    for place, item in walk(value):
        if isinstance(item, str):
            char = _bad_char(item)
            if char is None:
                continue
            if place is None:
                return f"must not contain {char}"
            where = clip(dotted(field, place))
            return f"a string at {where} contains {char}, which PostgreSQL cannot store"
        if isinstance(item, dict):
            for key in item:
                char = _bad_char(key) if isinstance(key, str) else None
                if char is not None:
                    where = clip(dotted(field, place))
                    return f"a key in {where} contains {char}, which PostgreSQL cannot store"
    return None
