"""Frames on a request socket: the length prefix, the rule set, the evaluation header, envelopes."""

from __future__ import annotations

import functools
import json
import socket
import struct
from dataclasses import dataclass
from typing import Any

_LENGTH = struct.Struct(">I")


def frame(data: bytes) -> bytes:
    """``data`` prefixed with its length (4 bytes, big-endian)."""
    return _LENGTH.pack(len(data)) + data


def _read_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError("request socket closed")
        buf += chunk
    return bytes(buf)


def read_frame(sock: socket.socket) -> bytes:
    """The next frame's data from a blocking socket (EOFError when it closes first)."""
    (n,) = _LENGTH.unpack(_read_exact(sock, _LENGTH.size))
    return _read_exact(sock, n)


def encode_spec(exprs: list[str], params: dict[str, Any]) -> bytes:
    """A rule set, canonically: the same rules and params always give the same bytes."""
    return json.dumps({"exprs": exprs, "params": params}, sort_keys=True).encode()


def decode_spec(data: bytes) -> tuple[list[str], dict[str, Any]]:
    doc = json.loads(data)
    return list(doc["exprs"]), dict(doc["params"])


#: ``EvalHeader.mode``: the first match (live routing), the first match of each of several
#: envelopes (concurrent live deliveries of one rule set), or every rule's verdict (history).
MODE_MATCH = ""
MODE_MANY = "m"
MODE_VERDICTS = "v"


@dataclass(frozen=True)
class EvalHeader:
    """Where an evaluation starts and how much of the event's budget it has left.

    ``mode`` is :data:`MODE_MATCH` (one envelope, the first match), :data:`MODE_MANY`
    (one envelope per line, each answered as in match mode, its own ``budget_ms``, in
    turn: each answer ends with its done line) or :data:`MODE_VERDICTS` (one envelope per
    line, every rule's verdict; ``only`` stops each envelope after that rule).

    ``sweep`` (match and many modes, from rule 0): each envelope's rules run in one go
    under one alarm of ``rule_ms`` (see :data:`SWEEP`), rather than one by one.
    """

    start: int
    budget_ms: float
    mode: str = MODE_MATCH
    only: int | None = None
    sweep: bool = False


def encode_envelope(envelope: dict[str, Any]) -> bytes:
    """The envelope as the evaluator reads it: compact JSON, UTF-8, on one line.

    An envelope holding its payload's JSON text (``payload_json``: a stored delivery's
    body, proven to read as its payload value, without raw newlines) gets that text in
    place of the payload written out again: what jq reads is the same, for less work.
    """
    text = getattr(envelope, "payload_json", None)
    if text is None or "payload" not in envelope:
        return _ENCODER.encode(envelope).encode()
    before: dict[str, Any] = {}
    after: dict[str, Any] = {}
    side = before
    for key, value in envelope.items():
        if key == "payload":
            side = after
        else:
            side[key] = value
    head = _ENCODER.encode(before)[:-1] + ("," if before else "")
    tail = ("," if after else "") + _ENCODER.encode(after)[1:]
    return b"".join((head.encode(), b'"payload":', text, tail.encode()))


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def encode_eval(header: EvalHeader, envelope: bytes) -> bytes:
    """The evaluator's frame data: the header as one JSON line, then the encoded envelope."""
    return _header_line(header) + envelope


@functools.lru_cache(maxsize=256)
def _header_line(header: EvalHeader) -> bytes:
    # remembered: nearly every delivery sends the same first header (rule 0, the whole budget)
    doc: dict[str, Any] = {"start": header.start, "budget_ms": header.budget_ms}
    if header.mode:
        doc["mode"] = header.mode
    if header.only is not None:
        doc["only"] = header.only
    if header.sweep:
        doc["sweep"] = True
    return json.dumps(doc).encode() + b"\n"


def encode_verdicts_eval(header: EvalHeader, envelopes: list[bytes]) -> bytes:
    """A many or verdicts frame's data: the header line, then one encoded envelope per line.

    :func:`encode_envelope` never writes a raw newline (JSON escapes them in strings).
    """
    return encode_eval(header, b"\n".join(envelopes))


def decode_eval(data: bytes) -> tuple[EvalHeader, bytes]:
    head, _, envelope = data.partition(b"\n")
    doc = json.loads(head)
    only = doc.get("only")
    return EvalHeader(
        int(doc["start"]),
        float(doc["budget_ms"]),
        str(doc.get("mode", "")),
        None if only is None else int(only),
        doc.get("sweep") is True,
    ), envelope
