"""The HTTP edge of the app: size limits, outages, shutdown, as a producer meets them."""

from __future__ import annotations

import http.client
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from sbtest import CLI, database_refusing
from sbworld import World


def _exchange(port: int, request: bytes, *, read_timeout: float = 10.0) -> bytes:
    """Send raw bytes, return everything the server sends before closing or going quiet."""
    with socket.create_connection(("127.0.0.1", port), timeout=read_timeout) as sock:
        sock.sendall(request)
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except (TimeoutError, ConnectionResetError):
            pass
    return b"".join(chunks)


def _world(
    server_factory: Any,
    dsn: str,
    *extra: str,
    config: Path | None = None,
) -> tuple[Any, World]:
    srv = server_factory(dsn, *extra, config=config)
    w = World(CLI(srv.env))
    w.human("alice")
    w.endpoint("alice", "owner")
    return srv, w


def _path(hook: dict[str, Any]) -> str:
    return "/" + hook["ingest_url"].split("/", 3)[3]


def test_headers_over_the_limit_answer_431_and_bodies_413(server_factory: Any, dsn: str) -> None:
    srv, w = _world(server_factory, dsn)
    hook = w.webhook("owner", "generic")
    big_header = b"X-Big: " + b"a" * 20_000
    reply = _exchange(
        srv.port,
        b"POST "
        + _path(hook).encode()
        + b" HTTP/1.1\r\nHost: x\r\n"
        + big_header
        + b"\r\nContent-Length: 2\r\n\r\n{}",
    )
    assert reply.startswith(b"HTTP/1.1 431 "), reply[:200]
    resp = httpx.post(hook["ingest_url"], content=b"x" * (5 * 1024 * 1024 + 1), timeout=60)
    assert resp.status_code == 413 and resp.json() == {
        "error": "payload too large",
        "code": "payload_too_large",
    }


def test_expect_continue_with_an_oversized_length_gets_413_without_continue(
    server_factory: Any,
    dsn: str,
) -> None:
    srv, w = _world(server_factory, dsn)
    hook = w.webhook("owner", "generic")
    head = (
        b"POST " + _path(hook).encode() + b" HTTP/1.1\r\nHost: x\r\n"
        b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n"
    )
    # The client sends no body: it waits for "100 Continue", which must never come.
    reply = _exchange(srv.port, head % (64 * 1024 * 1024), read_timeout=5)
    assert reply.startswith(b"HTTP/1.1 413 "), reply[:200]
    assert b"100 Continue" not in reply
    assert b"connection: close" in reply.lower()
    # A body within the limit is invited and accepted as usual.
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock:
        sock.sendall(head % 2)
        assert sock.recv(1024).startswith(b"HTTP/1.1 100 Continue")
        sock.sendall(b"{}")
        assert sock.recv(65536).startswith(b"HTTP/1.1 202 ")


@pytest.mark.slow
def test_database_down_answers_503_within_the_configured_bound_without_driver_text(
    server_factory: Any,
    pg_server: Any,
    dsn: str,
    tmp_path: Path,
) -> None:
    config = tmp_path / "switchboard.toml"
    config.write_text("[server]\ndatabase_timeout_ms = 300\n")
    srv, w = _world(server_factory, dsn, config=config)
    hook = w.webhook("owner", "generic")
    dbname = conninfo_to_dict(dsn)["dbname"]
    # HEAD, as load balancers ask: the status alone
    head = httpx.head(srv.base_url + "/healthz", timeout=30)
    assert (head.status_code, head.content) == (200, b""), head
    with database_refusing(pg_server, dsn):
        for url in (hook["ingest_url"], srv.base_url + "/webhooks/w/" + "0" * 48):
            started = time.monotonic()
            resp = httpx.post(url, content=b"{}", timeout=30)
            elapsed = time.monotonic() - started
            assert resp.status_code == 503, resp.text
            # Generous against a noisy machine; the pool's old wait was 10 s.
            assert elapsed < 5, elapsed
            assert resp.json() == {"error": "database unavailable", "code": "unavailable"}
            assert resp.headers["retry-after"].isdigit()
            assert dbname not in resp.text and "connection" not in resp.text
        started = time.monotonic()
        health = httpx.get(srv.base_url + "/healthz", timeout=30)
        assert time.monotonic() - started < 2.5
        assert health.status_code == 503
        assert health.json() == {"status": "unavailable", "database": "unreachable"}
        assert "retry-after" in health.headers
        head = httpx.head(srv.base_url + "/healthz", timeout=30)
        assert (head.status_code, head.content) == (503, b""), head
    # The driver's text went to the log instead.
    assert "not currently accepting connections" in srv.log.read_text()


@pytest.mark.slow
def test_sigterm_stops_new_requests_at_once_and_finishes_in_flight_ones(
    server_factory: Any,
    dsn: str,
) -> None:
    srv, w = _world(server_factory, dsn)
    hook = w.webhook("owner", "generic")
    path = _path(hook)
    stop = threading.Event()
    outcomes: list[tuple[float, int | str]] = []

    def hammer() -> None:
        # One keep-alive connection, requests back to back, as a busy producer sends them.
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
        n = 0
        deadline = time.monotonic() + 30
        while not stop.is_set() and time.monotonic() < deadline:
            n += 1
            try:
                conn.request("POST", path, body=b"{}", headers={"X-Delivery-Id": f"k{n}"})
                resp = conn.getresponse()
                resp.read()
                outcomes.append((time.monotonic(), resp.status))
                if resp.getheader("connection", "").lower() == "close":
                    conn.close()
            except (OSError, http.client.HTTPException) as exc:
                outcomes.append((time.monotonic(), type(exc).__name__))
                conn.close()
                if isinstance(exc, ConnectionRefusedError):
                    return
                time.sleep(0.01)

    thread = threading.Thread(target=hammer)
    thread.start()
    while len(outcomes) < 20:
        time.sleep(0.01)
    assert srv.proc is not None
    sent_at = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    srv.proc.wait(20)
    exited_at = time.monotonic()
    stop.set()
    thread.join(20)
    after = [(t, o) for t, o in outcomes if t > sent_at]
    accepted_after = [o for _, o in after if o == 202]
    # The signal takes a moment to reach the loop; from then on no request starts: a
    # later one is refused (503 + close) or finds the listener gone. Without draining,
    # the keep-alive connection went on being served for the whole grace period.
    assert not [t for t, o in after if o == 202 and t > sent_at + 1.0], after
    assert all(o in (202, 503) or isinstance(o, str) for _, o in after), after
    # Without draining, a busy keep-alive connection held the server for its whole
    # 15 s grace period.
    assert exited_at - sent_at < 10, exited_at - sent_at
    before = [o for t, o in outcomes if t <= sent_at]
    assert before.count(202) >= 20
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM events").fetchone()
        assert row is not None
    # Nothing acknowledged was lost: every 202 the producer saw is a stored event.
    assert row[0] >= before.count(202) + len(accepted_after)


async def test_a_worker_freezes_what_it_loaded_before_serving(dsn: str, tmp_path: Path) -> None:
    """Full collections must not walk the ~130,000 objects a worker loads at start: each
    such walk stopped every request for 65-130 ms (tail latency under load)."""
    import gc

    from sbtest import make_env

    from switchboard.app import create_app
    from switchboard.config import load_config
    from switchboard.runtime import Runtime

    rt = Runtime(load_config(env=make_env(dsn, tmp_path / "data")))
    app = create_app(rt, name="freeze_test")
    [start] = [fl.listener for fl in app._future_listeners if fl.event == "before_server_start"]
    from switchboard.gctune import YOUNG_THRESHOLD

    gc.unfreeze()
    threshold = gc.get_threshold()
    gc.set_threshold(700, *threshold[1:])  # Python's default, whatever ran here before
    try:
        await start(app)
        assert gc.get_freeze_count() > 20_000
        # and the young collections spaced out (a re-route batch's envelopes, alive across
        # its write, were promoted into full collections at the default 700)
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD
        assert rt.store.db is not None  # and the listener still opened the store
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
        await rt.shutdown()


def test_ingest_404_and_405_never_echo_the_path(server_factory: Any, dsn: str) -> None:
    # The path of an ingest URL is its capability token: no error body may quote it.
    srv, w = _world(server_factory, dsn)
    hook = w.webhook("owner", "generic")
    token = _path(hook).rsplit("/", 1)[1]
    got = httpx.get(hook["ingest_url"], timeout=30)
    assert got.status_code == 405, got.text
    assert got.json() == {"error": "method not allowed", "code": "method_not_allowed"}
    assert got.headers["allow"] == "POST"
    for method in ("PUT", "DELETE", "PATCH"):
        resp = httpx.request(method, hook["ingest_url"], timeout=30)
        assert resp.status_code == 405 and token not in resp.text
    for url in (hook["ingest_url"] + "/extra", f"{srv.base_url}/webhooks/{token}"):
        resp = httpx.post(url, content=b"{}", timeout=30)
        assert resp.status_code == 404, resp.text
        assert resp.json() == {"error": "not found", "code": "not_found"}
    unknown = httpx.post(srv.base_url + "/webhooks/w/" + "0" * 48, content=b"{}", timeout=30)
    assert unknown.json() == {"error": "unknown webhook", "code": "not_found"}
    assert "0" * 48 not in unknown.text
    assert token not in srv.log.read_text()
