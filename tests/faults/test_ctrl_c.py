"""Ctrl-C in the terminal that runs ``serve``: SIGINT reaches serve and every worker at once
(the whole foreground process group), and it is still the drain SIGTERM gives: what was
read is answered and stored, then serve stops the embedded PostgreSQL it started (which
sits in a session of its own, so the terminal's signal never reaches it first)."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from sbfaults import (
    assert_gone_with_serve,
    embedded_stage,
    read_reply,
    stop_leftover_postmaster,
    stored_deliveries,
)

from switchboard.store.embedded import EmbeddedPostgres

IN_FLIGHT = 8


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_ctrl_c_drains_like_sigterm_and_stops_the_embedded_database(
    server_factory: Any, tmp_path: Path, workers: int
) -> None:
    data = tmp_path / "data"
    srv = server_factory(None, "--workers", str(workers), data_dir=data)
    path, postmaster, group = embedded_stage(srv, data)

    bodies = {f"ctrl-c-{i}": json.dumps({"n": i}).encode() for i in range(IN_FLIGHT)}
    flying = {}
    for delivery, body in bodies.items():  # in flight at the signal: half a body read
        sock = socket.create_connection(("127.0.0.1", srv.port))
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"X-Delivery-Id: {delivery}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body[: len(body) // 2]
        )
        flying[delivery] = sock
    time.sleep(0.3)
    try:
        os.killpg(srv.proc.pid, signal.SIGINT)  # what the terminal sends on Ctrl-C
        time.sleep(0.2)
        answered = {}
        for delivery, sock in flying.items():
            sock.sendall(bodies[delivery][len(bodies[delivery]) // 2 :])
            answered[delivery] = read_reply(sock)
            sock.close()
        code = srv.proc.wait(30)
        log = srv.log.read_text()
        for delivery, reply in answered.items():
            assert reply.startswith(b"HTTP/1.1 202 "), (delivery, reply[:200], log[-3000:])
        assert code == 0, (code, log[-3000:])
        assert_gone_with_serve(postmaster, group, log)
    finally:
        stop_leftover_postmaster(data)  # this test leaves no server behind, even failing
    # Every delivery answered 202 was committed: read back from the stopped server's data.
    _assert_stored(data, set(bodies))


def _assert_stored(data: Path, deliveries: set[str]) -> None:
    embedded = EmbeddedPostgres(data, quiet=True)
    try:
        stored = stored_deliveries(embedded.start())
    finally:
        embedded.stop()
    assert stored == {d: 1 for d in deliveries}
