"""Delivery ids as keys: every two different ids stay two keys, however they are spelled."""

from __future__ import annotations

import itertools
import re

from switchboard.pgtext import key_text

# the characters escapes are made of, a backslash, and the characters that get escaped
ALPHABET = ["\\", "x", "u", "f", "0", "d", "a", "\x00", "\udcff", "\ud800"]
_TOKEN = re.compile(r"\\\\|\\x([0-9a-f]{2})|\\u([0-9a-f]{4})|.", re.S)


def decoded(key: str) -> str:
    """The id ``key`` was made from: what a reader of stored keys can rely on."""
    out = []
    for m in _TOKEN.finditer(key):
        if m[0] == "\\\\":
            out.append("\\")
        elif m[1] is not None:
            byte = int(m[1], 16)
            out.append("\x00" if byte == 0 else chr(0xDC00 + byte))
        elif m[2] is not None:
            out.append(chr(int(m[2], 16)))
        else:
            out.append(m[0])
    return "".join(out)


def test_every_short_id_over_the_tricky_characters_is_its_own_key() -> None:
    seen: dict[str, str] = {}
    for n in range(6):
        for chars in itertools.product(ALPHABET, repeat=n):
            value = "".join(chars)
            key = key_text(value)
            assert "\x00" not in key and not re.search("[\ud800-\udfff]", key)
            assert decoded(key) == value, (value, key)
            assert seen.setdefault(key, value) == value, (value, seen[key], key)


def test_keys_without_a_backslash_before_an_escape_are_as_they_were() -> None:
    # what was stored before backslashes were doubled is found again by its redelivery
    for value in ("plain", "a\\b", "C:\\temp", "trailing\\", "evt_123", "id-\udcff", "x\x00"):
        assert key_text(value) == {"id-\udcff": "id-\\xff", "x\x00": "x\\x00"}.get(value, value)
    assert key_text("id-\\xff") == "id-\\\\xff" != key_text("id-\udcff")
