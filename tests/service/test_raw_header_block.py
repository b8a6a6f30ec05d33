"""The stored header block: the bytes as they arrived, pair by pair, secrets redacted."""

from __future__ import annotations

import pytest

from switchboard.pgtext import raw_bytes
from switchboard.sanitize import sanitize_pairs
from switchboard.service.ingest import raw_header_block
from switchboard.sources import Headers


def _pairwise(headers: Headers) -> bytes:
    clean = sanitize_pairs(headers.items())
    return b"\r\n".join(
        raw_bytes(name) + b": " + raw_bytes(value)
        for (name, _), (_, value) in zip(headers.items(), clean, strict=True)
    )


@pytest.mark.parametrize(
    "pairs",
    [
        [("host", "x"), ("content-type", "application/json"), ("x-delivery-id", "d-1")],
        [("x-a", "1"), ("x-a", "2"), ("x-nul", "a\x00b")],  # repeated names keep their lines
        [("authorization", "Bearer s3cr3t-t0ken-value"), ("x-signature", "sha256=abc")],
        [("x-latin", "caf\udcc3\udca9"), ("x-bad", "\udcff\udcfe")],  # bytes Sanic escaped
        [("x-lone", "\ud800"), ("x-utf8", "é")],  # a surrogate no decoder makes; text
        [],
    ],
)
def test_the_block_is_each_pairs_raw_bytes_joined(pairs: list[tuple[str, str]]) -> None:
    headers = Headers(pairs)
    block = raw_header_block(headers, sanitize_pairs(headers.items()))
    assert block == _pairwise(headers)
    assert b"s3cr3t" not in block


def test_escaped_bytes_come_back_exactly() -> None:
    headers = Headers([("x-raw", b"caf\xc3\xa9 \xff".decode("utf-8", "surrogateescape"))])
    assert raw_header_block(headers, sanitize_pairs(headers.items())) == b"x-raw: caf\xc3\xa9 \xff"
