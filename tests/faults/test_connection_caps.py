"""At most so many open connections per worker, and per client address: one more is
answered 503 at once and closed (never held, never reset), and is let in again once
others close."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import httpx


def _open(port: int, source: str) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
    return s


def _answer(s: socket.socket) -> bytes:
    """What the server says to a connection that sent nothing (b"" if it says nothing)."""
    s.settimeout(0.5)
    try:
        return s.recv(4096)
    except TimeoutError:
        return b""


def test_connections_over_a_cap_get_503_at_once(
    server_factory: Any, dsn: str, tmp_path: Path
) -> None:
    config = tmp_path / "sb.toml"
    config.write_text("[server]\nmax_connections = 30\nmax_connections_per_client = 20\n")
    srv = server_factory(dsn, config=config)
    held: list[socket.socket] = []
    try:
        held += [_open(srv.port, "127.0.0.1") for _ in range(20)]
        extra = _open(srv.port, "127.0.0.1")
        started = time.monotonic()
        said = _answer(extra)
        assert said.startswith(b"HTTP/1.1 503 "), said
        assert b"Retry-After: 2" in said and b'"code": "unavailable"' in said
        assert time.monotonic() - started < 0.5
        assert extra.recv(1) == b""  # and closed
        extra.close()
        # another address still gets in, up to the worker's cap
        held += [_open(srv.port, "127.0.0.2") for _ in range(10)]
        for s in held[-10:]:
            assert _answer(s) == b""  # admitted: waiting for a request
        third = _open(srv.port, "127.0.0.3")
        assert _answer(third).startswith(b"HTTP/1.1 503 ")
        third.close()
        # once connections close, others are admitted again
        for s in held[:5]:
            s.close()
        held = held[5:]
        time.sleep(0.3)
        reply = httpx.get(srv.base_url + "/healthz", timeout=10)
        assert reply.status_code == 200, reply.text
    finally:
        for s in held:
            s.close()
    time.sleep(0.3)
    assert "refused" in srv.log.read_text() and "over the caps" in srv.log.read_text()
