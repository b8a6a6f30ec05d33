"""SIGTERM under load: every request the server has read is answered, in-flight requests
finish within ``server.shutdown_grace_s``, only those past it are cut (and counted), and a
new connection during the drain is refused or answered 503, never accepted and then reset,
with one worker and with several (where serve's main process owns the listening socket)."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import time
from typing import Any

import pytest
from sbfaults import read_reply, stored_deliveries
from sbtest import CLI
from sbworld import World

GRACE_S = 4
IN_FLIGHT = 16
IDLE = 4
#: New connections opened while the drain runs.
NEW = 4


def _new_connection(port: int, request: bytes) -> str:
    """What a client opening a connection during the drain sees: ``refused`` at connect,
    ``503`` (with ``Connection: close`` and ``Retry-After``), or anything else verbatim
    (``reset``, an empty reply, another status): the last are failures."""
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    except ConnectionRefusedError:
        return "refused"
    try:
        sock.sendall(request)
        reply = read_reply(sock)
    except ConnectionResetError:
        return "reset after acceptance"
    finally:
        sock.close()
    head = reply.split(b"\r\n\r\n", 1)[0].lower()
    if (
        reply.startswith(b"HTTP/1.1 503 ")
        and b"\r\nconnection: close" in head
        and b"\r\nretry-after: " in head
    ):
        return "503"
    return f"accepted, then {reply[:80]!r}"


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_answers_what_it_read_and_cuts_only_past_the_grace(
    server_factory: Any, dsn: str, fault_config: Any, workers: int
) -> None:
    srv = server_factory(
        dsn,
        "--workers",
        str(workers),
        config=fault_config(f"[server]\nshutdown_grace_s = {GRACE_S}\n"),
    )
    w = World(CLI(srv.env))
    w.human("alice")
    w.endpoint("alice", "owner")
    path = "/" + w.webhook("owner", "generic")["ingest_url"].split("/", 3)[3]

    def head(delivery: str, length: int) -> bytes:
        return (
            f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"X-Delivery-Id: {delivery}\r\nContent-Length: {length}\r\n\r\n"
        ).encode()

    bodies = {f"inflight-{i}": json.dumps({"n": i}).encode() for i in range(IN_FLIGHT)}
    # In flight at the signal: headers and half of each body read.
    flying = {}
    for delivery, body in bodies.items():
        sock = socket.create_connection(("127.0.0.1", srv.port))
        sock.sendall(head(delivery, len(body)) + body[: len(body) // 2])
        flying[delivery] = sock
    # One that will not finish within the grace: it is cut.
    stuck = socket.create_connection(("127.0.0.1", srv.port))
    stuck.sendall(head("stuck", 100) + b"{")
    # Idle keep-alive connections that have served a request.
    idle = []
    for i in range(IDLE):
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
        conn.request("POST", path, body=b"{}", headers={"X-Delivery-Id": f"idle-{i}"})
        resp = conn.getresponse()
        resp.read()
        assert resp.status == 202
        idle.append(conn)
    time.sleep(0.3)

    assert srv.proc is not None
    signalled = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    # A new request on an open connection: 503, Connection: close, Retry-After; not a reset.
    for i, conn in enumerate(idle):
        conn.request("POST", path, body=b"{}", headers={"X-Delivery-Id": f"late-{i}"})
        resp = conn.getresponse()
        resp.read()
        assert resp.status == 503, resp.status
        assert resp.getheader("connection") == "close" and resp.getheader("retry-after")
    # A new connection while the drain runs (the stuck request holds it open): refused at
    # connect in every worker at once, or 503; never accepted into a queue nobody reads.
    seen = {_new_connection(srv.port, head(f"new-{i}", 2) + b"{}") for i in range(NEW)}
    assert seen <= {"refused", "503"}, seen
    # The requests in flight finish, and are answered.
    answered = {}
    for delivery, sock in flying.items():
        body = bodies[delivery]
        sock.sendall(body[len(body) // 2 :])
        answered[delivery] = read_reply(sock)
        sock.close()
    for delivery, reply in answered.items():
        assert reply.startswith(b"HTTP/1.1 202 "), (delivery, reply[:200])
    srv.proc.wait(GRACE_S + 10)
    exited = time.monotonic() - signalled
    # The stuck one held the stop for the whole grace, and no longer.
    assert GRACE_S - 0.5 < exited < GRACE_S + 3, exited
    assert read_reply(stuck) == b""
    stuck.close()
    log = srv.log.read_text()
    assert "shutdown: 1 request(s) still in flight after server.shutdown_grace_s" in log, log[
        -2000:
    ]
    print(
        f"\nSIGTERM, {workers} worker(s): {IN_FLIGHT} in flight all answered 202, {IDLE} new"
        f" requests on open connections 503 + close, {NEW} new connections {sorted(seen)},"
        f" 1 past the grace cut and counted; exited {exited:.2f} s after the signal"
    )
    acked = [*bodies, *(f"idle-{i}" for i in range(IDLE))]
    assert stored_deliveries(dsn) == {d: 1 for d in acked}
