"""orjson's fast path reads every body exactly as the json path does, or leaves it to it."""

from __future__ import annotations

import json
import random
import struct
import sys
from typing import Any

import pytest

from switchboard.routing.envelope import (
    _MINUS_ZERO,
    _SLOW,
    _UNCLEAN_ESCAPE,
    _parse_fast,
    _parse_json,
    parse_payload,
    payload_and_text,
)

BOM = b"\xef\xbb\xbf"


def same(a: Any, b: Any) -> bool:
    """Equal, and of the same types all the way down: 1, 1.0 and True differ, and so do
    0.0 and -0.0; objects also in key order (jq keeps it). A loop, not recursion: the
    corpus nests past the recursion limit."""
    pairs = [(a, b)]
    while pairs:
        x, y = pairs.pop()
        if type(x) is not type(y):
            return False
        if isinstance(x, float):
            if struct.pack("<d", x) != struct.pack("<d", y):
                return False
        elif isinstance(x, dict):
            if list(x) != list(y):
                return False
            pairs.extend((x[k], y[k]) for k in x)
        elif isinstance(x, list):
            if len(x) != len(y):
                return False
            pairs.extend(zip(x, y, strict=True))
        elif x != y:
            return False
    return True


def test_same_tells_types_apart() -> None:
    assert not same(1, 1.0) and not same(1, True) and not same(0.0, -0.0)
    assert not same({"a": 1, "b": 2}, {"b": 2, "a": 1})
    assert same({"a": [1, -0.0, "x", None]}, {"a": [1, -0.0, "x", None]})


CORPUS = [
    # numbers: integers around 64 bits, zeros, float texts, the edges of double
    b"9223372036854775807",
    b"-9223372036854775808",
    b"-9223372036854775809",
    b"18446744073709551615",
    b"18446744073709551616",
    b"999999999999999999",
    b"-999999999999999999",
    b"1234567890123456789",
    b"12345678901234567890",
    b"[12345678901234567890123, -12345678901234567890123]",
    b'{"id": "12345678901234567890", "n": 1}',
    b"-0",
    b"-0.0",
    b"0.0",
    b"[-0, 0, -0.0, 0e0, -0e-0]",
    b"1.000",
    b"1.0e0",
    b"1E+2",
    b"1e308",
    b"1.7976931348623157e308",
    b"1.7976931348623159e308",
    b"1e309",
    b"-1e309",
    b"1e1000",
    b"[1e400, -1e400]",
    b"1e-400",
    b"-1e-400",
    b"5e-324",
    b"2.4703282292062328e-324",
    b"2.4703282292062327e-324",
    b"0e999999",
    b"1e-999999",
    b"0.1",
    b"0.30000000000000004",
    b"123456789012345678.5",
    b"0.12345678901234567890123",
    b"1.5e12345678901234567890",
    b"01",
    b"1.",
    b".5",
    b"+1",
    b"-",
    b"1e",
    b"0x10",
    # objects and strings
    b'{"a": 1, "b": 2, "a": 3}',
    b'{"a": {"x": 1}, "a": [2]}',
    b'{"": 0, " ": 1}',
    b'"\\ud800"',
    b'"\\udc00"',
    b'"\\ud800\\u0041"',
    b'"\\ud83d\\ude00"',
    b'"\\uD83D\\uDE00"',
    b'"\\ude00\\ud83d"',
    b'{"\\ud800": 1}',
    '"\U0001f600"'.encode(),
    b'"\xed\xa0\x80"',  # a surrogate encoded as UTF-8: not UTF-8
    b'"\\u0000"',
    b'"a\\u0000b"',
    b'"\x00"',
    b'"\x01"',
    b'"\x1f"',
    b'"\x7f"',
    b'"\t"',
    b'"\\t\\n\\r\\b\\f\\/\\\\\\""',
    b'"\\x41"',
    b'"\\U0041"',
    b'"\\u004"',
    '"Zo\u00eb \u2028 \u2029"'.encode(),
    # nesting around MAX_DEPTH (512) and orjson's own limit (1024)
    b"[" * 511 + b"]" * 511,
    b"[" * 512 + b"]" * 512,
    b"[" * 513 + b"]" * 513,
    b'{"a":' * 512 + b"1" + b"}" * 512,
    b'{"a":' * 513 + b"1" + b"}" * 513,
    b"[" * 1024 + b"]" * 1024,
    b"[" * 1025 + b"]" * 1025,
    b'["' + b"[" * 600 + b'"]',  # brackets in a string: not nesting
    b"[" * 100_000,
    # whitespace, trailing data, empty, BOM, bytes that are not UTF-8
    b" \t\r\n{} \t\r\n",
    b"\x0c{}",
    b"{}\x0b",
    b"\xc2\xa0{}",
    b"",
    b" ",
    b"\xc2\xa0",
    b"{} {}",
    b"[1]x",
    b"1 2",
    b"[1,]",
    b'{"a":1,}',
    b"/* c */ 1",
    b"NaN",
    b"[Infinity]",
    b"-Infinity",
    b"nul",
    b"true",
    b"True",
    b"null",
    BOM,
    BOM + b'{"x": 1}',
    BOM + BOM + b"1",
    b" " + BOM + b"1",
    b"\xfe\xff\x00\x31",
    b'{"a": "\xff"}',
    b"\xff",
    b"\xc3",
    b'"\xc3\xa9"',
    b'"\xe2\x82"',
    b'"\xf4\x90\x80\x80"',  # past U+10FFFF
    b'"\xc0\xaf"',  # overlong
]


def check(body: bytes) -> bool:
    """Assert the fast path agrees with the json path on ``body``; True if it answered."""
    stripped = body[len(BOM) :] if body.startswith(BOM) else body
    slow = _parse_json(stripped, None)
    fast = _parse_fast(stripped)
    if fast is not _SLOW:
        assert same(fast, slow), (body[:200], fast, slow)
    assert same(parse_payload(body), slow), body[:200]
    _check_text(body)
    return fast is not _SLOW


def _check_text(body: bytes) -> None:
    """``payload_and_text`` (which answers by the fast path where it can) against its json
    path reference: the same value, and a text only where it is proven: one that reads as
    exactly the value, the reference's own text whenever the reference gave one."""
    value, text = payload_and_text(body)
    if body.startswith(BOM):
        body = body[len(BOM) :]
    floats: list[str] = []
    ref = _parse_json(body, floats)
    if not _UNCLEAN_ESCAPE.search(body):
        assert same(value, ref), body[:200]
        ref_text = (
            None if ref is None or floats or _MINUS_ZERO.search(body) else body.replace(b"\n", b" ")
        )
        if ref_text is not None:
            assert text == ref_text, body[:200]
        elif text is not None:
            # proven where the reference was cautious: a float only in an overwritten
            # duplicate key; the text still reads as exactly the value
            assert same(_parse_json(text, None), value), body[:200]
            assert floats and not any(isinstance(x, float) for x in _leaves(value))
    else:
        assert text is None


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [x for v in value.values() for x in _leaves(v)]
    if isinstance(value, list):
        return [x for v in value for x in _leaves(v)]
    return [value]


@pytest.mark.parametrize("body", CORPUS, ids=range(len(CORPUS)))
def test_corpus(body: bytes) -> None:
    check(body)


#: Pieces the random bodies are made of: JSON's own tokens, numbers of every shape and
#: length, escapes (surrogates among them), control and non-UTF-8 bytes, and a BOM.
PIECES = [
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b'"',
    b"\\",
    b" ",
    b"\n",
    b"\t",
    b"\r",
    b"-",
    b".",
    b"e",
    b"E",
    b"+",
    b"0",
    b"true",
    b"false",
    b"null",
    b"NaN",
    b"\\u",
    b"\\ud83d",
    b"\\ude00",
    b"\\u0000",
    b"\x00",
    b"\x1f",
    b"\xff",
    b"\xc3\xa9",
    b"\xed\xa0\x80",
    BOM,
]


def _number(rnd: random.Random) -> bytes:
    digits = "".join(
        rnd.choice("0123456789") for _ in range(rnd.choice((1, 2, 17, 18, 19, 20, 25)))
    )
    text = rnd.choice(("", "-")) + (digits.lstrip("0") or "0")
    if rnd.random() < 0.5:
        text += "." + "".join(rnd.choice("0123456789") for _ in range(rnd.randrange(1, 22)))
    if rnd.random() < 0.4:
        text += rnd.choice("eE") + rnd.choice(("", "+", "-")) + str(rnd.randrange(0, 420))
    return text.encode()


def _string(rnd: random.Random) -> bytes:
    chars = [rnd.choice(("a", " ", "\u00e9", "\U0001f600", "\\n", "\\u00e9", "\\ud800", "\\udc00"))]
    chars += [rnd.choice(("b", "\\ud83d\\ude00", "\\\\", '\\"', "\\u0000")) for _ in range(3)]
    return ('"' + "".join(rnd.sample(chars, len(chars))) + '"').encode()


def _value(rnd: random.Random, depth: int) -> bytes:
    kind = rnd.randrange(6 if depth < 6 else 3)
    if kind == 0:
        return _number(rnd)
    if kind == 1:
        return _string(rnd)
    if kind == 2:
        return rnd.choice((b"true", b"false", b"null", b"-0", b"1.000", b"1e309", b"5e-324"))
    items = [_value(rnd, depth + 1) for _ in range(rnd.randrange(4))]
    if kind == 3:
        return b"[" + b", ".join(items) + b"]"
    keys = [rnd.choice((b'"a"', b'"b"', _string(rnd))) for _ in items]  # duplicates often
    return b"{" + b",".join(k + b":" + v for k, v in zip(keys, items, strict=True)) + b"}"


def _mutate(rnd: random.Random, body: bytes) -> bytes:
    at = rnd.randrange(len(body) + 1)
    how = rnd.randrange(3)
    if how == 0:  # insert a piece
        return body[:at] + rnd.choice(PIECES) + body[at:]
    if how == 1:  # drop a few bytes
        return body[:at] + body[at + rnd.randrange(1, 4) :]
    return body[:at] + bytes([rnd.randrange(256)]) + body[at + 1 :]  # change a byte


def random_body(rnd: random.Random) -> bytes:
    body = _value(rnd, 0)
    for _ in range(rnd.choice((0, 0, 1, 1, 2, 5))):
        body = _mutate(rnd, body)
    if rnd.random() < 0.1:
        body = BOM + body
    return body


def test_random_bodies() -> None:
    rnd = random.Random(38)
    answered = 0
    cases = 3000
    for _ in range(cases):
        answered += check(random_body(rnd))
    # Both paths are exercised: the fast one answers most of the valid bodies.
    assert cases // 5 < answered < cases, answered


def test_the_random_bodies_reach_every_kind() -> None:
    """The generator makes what the differential test is for: valid and invalid bodies,
    big integers, floats, duplicate keys and lone surrogates."""
    rnd = random.Random(38)
    bodies = [random_body(rnd) for _ in range(3000)]
    parsed = [parse_payload(b) for b in bodies]
    assert sum(p is None for p in parsed) > 300
    assert sum(p is not None for p in parsed) > 1000
    text = b"".join(bodies)
    for piece in (b"\\ud800", b"e309", b"-0", BOM):
        assert piece in text, piece
    assert any(isinstance(p, int) and abs(p) >= 2**64 for p in parsed)
    assert any(isinstance(p, float) for p in parsed)


def test_bom_is_dropped_once() -> None:
    assert parse_payload(BOM + b'{"x": 1}') == {"x": 1}
    assert parse_payload(BOM + b"\n 2 ") == 2
    assert parse_payload(BOM) is None
    assert parse_payload(BOM + BOM + b"1") is None
    assert parse_payload(b" " + BOM + b"1") is None
    # the stored delivery's proven text is the body without it (spliced into an envelope)
    assert payload_and_text(BOM + b'{"x": 1}') == ({"x": 1}, b'{"x": 1}')


def test_the_json_path_is_the_reference() -> None:
    """What the slow path reads, as before orjson: the values the corpus is judged by."""
    assert same(_parse_json(b"-0", None), 0)
    assert same(_parse_json(b"-0.0", None), -0.0)
    assert same(_parse_json(b"1.000", None), 1.0)
    assert same(_parse_json(b"1e1000", None), sys.float_info.max)
    assert same(_parse_json(b"12345678901234567890123", None), 12345678901234567890123)
    assert _parse_json(b'"\\ud800"', None) == "\ud800"
    assert _parse_json(b'{"a": 1, "a": 2}', None) == json.loads('{"a": 2}')
