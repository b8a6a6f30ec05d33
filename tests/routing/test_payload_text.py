"""A stored delivery's payload text stands in for its value only where any JSON reader
(jq in the sandbox) reads the same from both."""

from __future__ import annotations

import json

import jq
import pytest
from switchboard_rules.protocol import encode_envelope

from switchboard.routing.envelope import Envelope, clean_payload, payload_and_text
from switchboard.routing.replay import stored_envelope

PROVEN = [
    b'{"a": 1,\n  "b": [1, 2, {"c": "x\\u00e9\\/\\n"}], "d": null, "e": true}',
    b'{"a": 1, "a": 2, "b": 3}',  # a duplicate key: the last value at the first's place
    b"[123456789012345678901234567890, -5, 0]",
    b'"just a string"',
    b"  17 \r\n",
    '{"caf\u00e9": "\u2028"}'.encode(),
    b'\xef\xbb\xbf{"x": 1}',  # a byte order mark: dropped, from the text too
]
NOT_PROVEN = [
    b'{"a": 1.5}',
    b'{"a": 1e3}',
    b'{"a": -0}',
    b'{"a": "\\u0000"}',
    b'{"a": "\\ud800"}',
    b'{"a": NaN}',
    b"not json",
    b"",
    b'{"a": 1} x',
    b"\xff",
]


@pytest.mark.parametrize("body", PROVEN)
def test_proven_text_reads_as_the_value(body: bytes) -> None:
    value, text = payload_and_text(body)
    assert text is not None and b"\n" not in text
    assert value == clean_payload(body)
    doc = {"source": "generic", "payload": value, "after": {"k": [1]}}
    spliced, written = encode_envelope(Envelope(doc, text)), encode_envelope(dict(doc))
    assert b"\n" not in spliced
    program = jq.compile(". as $e | [$e, ($e | tojson), ($e.payload | keys_unsorted? // null)]")
    assert program.input_text(spliced.decode()).first() == (
        program.input_text(written.decode()).first()
    )


@pytest.mark.parametrize("body", NOT_PROVEN)
def test_unproven_bodies_are_written_out(body: bytes) -> None:
    value, text = payload_and_text(body)
    assert text is None
    assert value == clean_payload(body)


def test_stored_envelope_encodes_as_the_plain_one() -> None:
    from switchboard.registry import ProjectionRegistry

    event = {
        "source": "generic",
        "kind": "push",
        "trust_mode": "open",
        "verified": False,
        "content_type": "application/json",
        "headers": {"x-a": "1"},
        "body": b'{"n": 1,\n "s": "t"}',
    }
    env = stored_envelope(ProjectionRegistry(), event, "w1")
    assert isinstance(env, Envelope) and env.payload_json is not None
    assert json.loads(encode_envelope(env)) == json.loads(encode_envelope(dict(env)))
    assert list(json.loads(encode_envelope(env))) == list(dict(env))
