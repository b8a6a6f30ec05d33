"""The fast JSON writer writes what the standard library's text means, and falls back where it cannot."""

from __future__ import annotations

import datetime
import enum
import json
import random
import uuid
from typing import Any

import pytest

from switchboard.jsontext import dumps, dumps_bytes, dumps_default_str, sorted_key


class Colour(enum.StrEnum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


def _typed(value: Any) -> Any:
    """``value`` with each number tagged by its type, so 1, 1.0 and True stay apart."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    if isinstance(value, float):
        return ("float", repr(value))
    return (type(value).__name__, value)


CASES: list[Any] = [
    {"a": 1, "b": [1.5, -0.0, 0.0, "é\u2028\u0001", None, True, False]},
    {"big": 2**70, "neg": -(2**64), "edge": 2**63 - 1, "u64": 2**64 - 1},
    {"e": Colour.RED, "i": Level.HIGH},
    {1: "non-string key", "x": (1, 2)},
    [1e16, 1e-7, 5e-324, 1.7976931348623157e308, 0.1 + 0.2],
    "plain",
    [],
    {},
    {"nested": [{"deep": [[[[{"k": "v"}]]]]}]},
]


@pytest.mark.parametrize("value", CASES)
def test_dumps_means_what_json_wrote(value: Any) -> None:
    want = json.dumps(value, ensure_ascii=False)
    assert _typed(json.loads(dumps(value))) == _typed(json.loads(want))
    assert _typed(json.loads(dumps_bytes(value))) == _typed(json.loads(json.dumps(value)))


def test_a_random_corpus_means_the_same() -> None:
    rng = random.Random(38)

    def value(depth: int) -> Any:
        pick = rng.randrange(9 if depth < 4 else 6)
        if pick == 0:
            return rng.randrange(-(2**80), 2**80) if rng.random() < 0.2 else rng.randrange(-9, 9)
        if pick == 1:
            return rng.choice([0.0, -0.0, 1e300, 2.5, -1e-300, rng.random()])
        if pick == 2:
            return "".join(chr(rng.choice([0x41, 0xE9, 0x2028, 0x1F600, 0x22, 0x5C, 0x7F, 0x09]))
                           for _ in range(rng.randrange(6)))  # fmt: skip
        if pick == 3:
            return rng.choice([None, True, False])
        if pick in (4, 5):
            return rng.choice([Colour.RED, Level.HIGH, "x"])
        if pick in (6, 7):
            return {str(rng.randrange(99)): value(depth + 1) for _ in range(rng.randrange(4))}
        return [value(depth + 1) for _ in range(rng.randrange(4))]

    for _ in range(500):
        v = value(0)
        assert _typed(json.loads(dumps(v))) == _typed(json.loads(json.dumps(v))), v
        key = sorted_key(v)
        assert key is not None
        assert _typed(json.loads(key)) == _typed(json.loads(json.dumps(v, sort_keys=True)))


def test_what_orjson_refuses_is_the_standard_librarys_exact_text() -> None:
    assert dumps({"big": 2**70}) == json.dumps({"big": 2**70}, ensure_ascii=False)
    assert dumps({1: 2}) == json.dumps({1: 2}, ensure_ascii=False)
    assert dumps_bytes({"big": 2**70}) == json.dumps({"big": 2**70}).encode()


def test_sorted_key_is_canonical_and_none_when_there_is_no_json() -> None:
    assert sorted_key({"b": 1, "a": [2, {"d": 1, "c": 0}]}) == sorted_key(
        {"a": [2, {"c": 0, "d": 1}], "b": 1}
    )
    assert sorted_key({"b": 1, "a": 2}) == '{"a":2,"b":1}'
    assert sorted_key({"x": object()}) is None


def test_log_fields_spell_objects_as_str_does() -> None:
    when = datetime.datetime(2026, 12, 4, 18, 0, tzinfo=datetime.UTC)
    ident = uuid.UUID(int=7)
    doc = json.loads(dumps_default_str({"when": when, "id": ident, "o": Colour.RED, "n": 2**70}))
    assert doc == {"when": str(when), "id": str(ident), "o": "red", "n": 2**70}
