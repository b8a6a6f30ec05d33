"""Log hygiene: credentials redacted from every log line, repeated tracebacks rate-limited."""

from __future__ import annotations

import io
import logging
import random

import pytest

from switchboard import loghygiene
from switchboard.loghygiene import HygieneFilter, redact

TOKEN = "0123456789abcdef" * 3  # a 48-hex ingest token, the shape mint_token(nbytes=24) gives


@pytest.mark.parametrize(
    ("line", "secret"),
    [
        (f"unexpected error on POST /webhooks/w/{TOKEN}", TOKEN),
        ("unexpected error on POST /webhooks/w/probe-garbage?x=1", "probe-garbage"),
        (f"url 'http://127.0.0.1:8080/webhooks/w/{TOKEN}'", TOKEN),
        ("endpoint token sbe_" + "ab" * 32, "ab" * 32),
        ("signing secret whsec_" + "cd" * 32, "cd" * 32),
        ("Authorization: Bearer sbe_x.y-z", "sbe_x.y-z"),
        ("header sha256=" + "ef" * 32, "ef" * 32),
        ("webhook-signature: v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4=", "K5oZfzN95Z9U"),
        (f"bare {TOKEN} in a message", TOKEN),
    ],
)
def test_credentials_are_redacted(line: str, secret: str) -> None:
    out = redact(line)
    assert secret not in out and "«redacted»" in out


@pytest.mark.parametrize(
    "line",
    [
        "webhook 6f1c1f0e-7f5b-4b8e-9a51-3f7f2c1d9b20: verification failed: bad signature",
        "external id sha256:" + "0" * 64,  # a body hash is not a credential
        "GET /healthz 200",
        "POST /mcp 401",
    ],
)
def test_ordinary_lines_are_kept(line: str) -> None:
    assert redact(line) == line


def _logger() -> tuple[logging.Logger, io.StringIO, HygieneFilter]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    hygiene = HygieneFilter(every_s=60)
    handler.addFilter(hygiene)
    logger = logging.getLogger(f"test.hygiene.{id(stream)}")
    logger.propagate = False
    logger.addHandler(handler)
    return logger, stream, hygiene


def _fail(token: str) -> None:
    raise ValueError(f"boom for /webhooks/w/{token}")


def test_a_traceback_is_redacted_and_its_repeats_are_one_line_each() -> None:
    logger, stream, _ = _logger()
    for _ in range(5):
        try:
            _fail(TOKEN)
        except ValueError:
            logger.exception("unexpected error on POST /webhooks/w/%s", TOKEN)
    text = stream.getvalue()
    assert TOKEN not in text
    assert text.count("Traceback (most recent call last)") == 1
    assert text.count("unexpected error on POST /webhooks/w/«redacted»") == 5
    assert "repeat 4]" in text


def test_different_failures_each_keep_one_traceback() -> None:
    logger, stream, _ = _logger()
    for exc in (ValueError("a"), KeyError("b"), ValueError("c")):
        try:
            raise exc
        except Exception:
            logger.exception("failed")
    # ValueError twice from the same line: one traceback; KeyError: its own.
    assert stream.getvalue().count("Traceback (most recent call last)") == 2


def test_a_repeat_after_the_window_shows_its_traceback_again() -> None:
    logger, stream, hygiene = _logger()
    hygiene.every_s = 0.0
    for _ in range(2):
        try:
            _fail("x")
        except ValueError:
            logger.exception("failed")
    assert stream.getvalue().count("Traceback (most recent call last)") == 2


def _every_pattern(text: str) -> str:
    for pattern, repl in loghygiene._PATTERNS:
        text = pattern.sub(repl, text)
    return text


def test_the_literal_prefilters_never_skip_a_match() -> None:
    """``redact`` runs a pattern only when its cheap literal test passes: on tricky and on
    random text it answers exactly what running every pattern answers."""
    tricky = [
        "baſic dXNlcjpwYXNz",
        "ſha256=" + "ab" * 20,
        "\u212abearer x",
        "Authorization: BEARER abc.def",
        "V12=" + "0" * 20,
        "sig v1," + "a" * 30,
        "/webhooks/w/" + "f" * 48,
        "whsec_abc sbe_def",
        "x" + "0123456789abcdef" * 3,
    ]
    for text in tricky:
        assert loghygiene.redact(text) == _every_pattern(text), text
    tokens = [
        "/webhooks/w/",
        "tok",
        "sbe_",
        "whsec_",
        "Bearer ",
        "BASIC ",
        "baſic ",
        "ſha1=",
        "sha256=",
        "V2=",
        "v1,",
        "\u212a",
        " ",
        "deadbeef" * 6,
        "0123456789abcdef" * 2,
        "«",
        "=",
        "/",
        "İ",
        "\n",
        '"',
    ]
    rng = random.Random(14)
    for _ in range(20_000):
        text = "".join(rng.choice(tokens) for _ in range(rng.randint(1, 10)))
        assert loghygiene.redact(text) == _every_pattern(text), repr(text)
