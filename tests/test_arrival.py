"""A request's arrival at the HTTP edge: chunked bodies held to the body deadline on every
route, the 408/417 bodies, a 431 on an ingest URL logged and counted, a harmless body on a
GET never logged as an error. Real sockets against a real ``serve``."""

from __future__ import annotations

import json
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
import sanic.exceptions
from sbfaults import crawl
from sbtest import CLI, Server
from sbworld import World

from switchboard.errors import error_body

HEADER_S = 1.5
BODY_S = 1.5
LATE_BODY = {
    "error": "request body not received within 1500 ms (server.body_timeout_ms)",
    "code": "request_timeout",
}
LATE_HEADERS = {
    "error": "request headers not received within 1500 ms (server.header_timeout_ms)",
    "code": "request_timeout",
}


@pytest.fixture(scope="module")
def server(
    module_server_factory: Any, module_dsn: str, tmp_path_factory: pytest.TempPathFactory
) -> Server:
    config = tmp_path_factory.mktemp("arrival-config") / "sb.toml"
    config.write_text(
        f"[server]\nheader_timeout_ms = {int(HEADER_S * 1000)}\n"
        f'body_timeout_ms = {int(BODY_S * 1000)}\n[log]\nformat = "json"\n'
    )
    srv: Server = module_server_factory(module_dsn, "--log-level", "info", config=config)
    return srv


@pytest.fixture(scope="module")
def ingest_path(server: Server) -> str:
    w = World(CLI(server.env), direct=True)
    w.human("alice")
    w.endpoint("alice", "owner")
    hook = w.webhook("owner", "generic")
    return "/" + hook["ingest_url"].split("/", 3)[3]


def _head(method: str, path: str, *headers: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: x", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _reply(got: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = got.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body)


def _exchange(port: int, request: bytes, timeout: float = 10) -> tuple[float, bytes, bool]:
    """Send ``request`` whole, then read until the server closes: (seconds, reply, closed)."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request)
        got = b""
        try:
            while chunk := sock.recv(65536):
                got += chunk
        except TimeoutError:
            return time.monotonic() - started, got, False
    return time.monotonic() - started, got, True


def _log(srv: Server, logger: str | None = None) -> list[dict[str, Any]]:
    lines = [json.loads(x) for x in srv.log.read_text().splitlines() if x.startswith("{")]
    return [d for d in lines if logger is None or d["logger"] == logger]


def test_chunked_bodies_are_cut_at_the_body_deadline_on_every_route(
    server: Server, ingest_path: str
) -> None:
    chunked = "Transfer-Encoding: chunked"
    routes = [("POST", ingest_path), ("GET", "/healthz"), ("GET", "/metrics")]

    def trickle(method: str, path: str) -> tuple[float, bytes, bool]:
        # One chunk byte a second: a 1-byte chunk each 6 s, for ever.
        head = _head(method, path, chunked)
        return crawl(server.port, head + b"1\r\na\r\n" * 10, every=1.0, limit=10, burst=len(head))

    def stall(method: str, path: str) -> tuple[float, bytes, bool]:
        # A chunk declared 5 bytes long, 2 of them sent, then nothing.
        head = _head(method, path, chunked)
        return crawl(server.port, head + b"5\r\nab", every=10.0, limit=10, burst=len(head) + 4)

    with ThreadPoolExecutor(2 * len(routes)) as pool:
        futures = {
            (kind.__name__, method, path): pool.submit(kind, method, path)
            for kind in (trickle, stall)
            for method, path in routes
        }
        results = {case: f.result() for case, f in futures.items()}
    for case, (seconds, got, closed) in results.items():
        assert closed and got.startswith(b"HTTP/1.1 408 "), (case, seconds, got[:200])
        assert _reply(got) == (408, LATE_BODY), case
        assert b"connection: close" in got.lower(), case
        assert BODY_S - 0.1 < seconds < BODY_S + 1.0, (case, seconds)


def test_a_body_left_unread_after_an_answer_is_cut_at_the_deadline(server: Server) -> None:
    # An unknown path is answered 404 before its body is read; the rest is not read for
    # ever at the client's pace: the connection closes at the body deadline.
    head = _head("POST", "/nowhere", "Transfer-Encoding: chunked")
    seconds, got, closed = crawl(
        server.port, head + b"1\r\na\r\n" * 10, every=1.0, limit=10, burst=len(head)
    )
    assert closed and got.startswith(b"HTTP/1.1 404 "), (seconds, got[:200])
    assert BODY_S - 0.1 < seconds < BODY_S + 1.0, seconds


def test_408_and_417_bodies_name_what_was_wrong(server: Server, ingest_path: str) -> None:
    # Headers never finished; a Content-Length larger than what is sent; an Expect other
    # than 100-continue.
    cases = [
        (b"POST " + ingest_path.encode() + b" HTTP/1.1\r\nHost: x\r\n", 408, LATE_HEADERS),
        (_head("POST", ingest_path, "Content-Length: 10") + b"{}", 408, LATE_BODY),
        (
            _head("POST", ingest_path, "Content-Length: 2", "Expect: 200-ok") + b"{}",
            417,
            {
                "error": 'unsupported Expect: "200-ok" (only "100-continue" is)',
                "code": "expectation_failed",
            },
        ),
        (
            _head("POST", ingest_path, "Content-Length: 2", 'Expect: a"\\b' + "z" * 100) + b"{}",
            417,
            {
                "error": 'unsupported Expect: "a\\x22\\x5cb'
                + "z" * 60
                + '…" (only "100-continue" is)',
                "code": "expectation_failed",
            },
        ),
    ]
    for request, status, body in cases:
        seconds, got, closed = _exchange(server.port, request)
        assert closed and _reply(got) == (status, body), got[:300]
        if status == 408:
            assert 1.4 < seconds < 2.5, seconds
    assert ingest_path.rsplit("/", 1)[1] not in server.log.read_text()


def _framework_4xx() -> list[int]:
    """Every 4xx status one of Sanic's exceptions carries."""
    found = {
        getattr(cls, "status_code", 0)
        for cls in vars(sanic.exceptions).values()
        if isinstance(cls, type) and issubclass(cls, sanic.exceptions.SanicException)
    }
    return sorted(s for s in found if 400 <= s < 500)


@pytest.mark.parametrize("status", [*_framework_4xx(), 431])
def test_every_4xx_the_framework_raises_has_a_code_and_message_of_its_own(status: int) -> None:
    # "internal" is a 500's code only; "error" is the message of a status nobody mapped.
    body = error_body(status)
    assert body["code"] != "internal" and body["error"] != "error", body


def _counted(srv: Server, status: str) -> float:
    text = httpx.get(srv.base_url + "/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith("switchboard_deliveries_total{") and f'status="{status}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_431_on_an_ingest_url_is_logged_and_counted(server: Server, ingest_path: str) -> None:
    before = _counted(server, "431")
    logged = len([d for d in _log(server, "switchboard.delivery") if d["status"] == 431])
    big = _head("POST", ingest_path, "Content-Length: 2", "X-Big: " + "a" * 9000) + b"{}"
    many = [f"X-H{i}: " + "a" * 300 for i in range(40)]
    for request in (big, _head("POST", ingest_path, "Content-Length: 2", *many) + b"{}"):
        _, got, _ = _exchange(server.port, request)
        assert _reply(got) == (
            431,
            {"error": "request headers too large", "code": "headers_too_large"},
        )
    time.sleep(0.2)
    lines = [d for d in _log(server, "switchboard.delivery") if d["status"] == 431]
    assert len(lines) == logged + 2, lines
    assert all(d["source"] == "unknown" and d["webhook_id"] is None for d in lines)
    assert _counted(server, "431") == before + 2
    assert ingest_path.rsplit("/", 1)[1] not in server.log.read_text()


def test_a_request_line_longer_than_the_head_limit_is_414_and_a_long_header_431(
    server: Server, ingest_path: str
) -> None:
    # RFC 9110: the target alone filled the 8 KiB head (Sanic answered 431 for it too)
    for target in ("/" + "a" * 9000, ingest_path + "?" + "a" * 20_000):
        _, got, closed = _exchange(server.port, _head("GET", target))
        assert got.startswith(b"HTTP/1.1 414 Request-URI Too Long\r\n"), got[:100]
        assert _reply(got) == (414, {"error": "request URI too long", "code": "uri_too_long"})
        assert closed
    # a target that fits, with the headers over the limit: still the headers' 431
    _, got, _ = _exchange(server.port, _head("GET", "/" + "a" * 6000, "X-Big: " + "b" * 3000))
    assert _reply(got)[0] == 431


def test_a_408_or_417_on_an_ingest_url_is_logged_and_counted(
    server: Server, ingest_path: str
) -> None:
    before = {status: _counted(server, status) for status in ("408", "417")}
    logged = len(_log(server, "switchboard.delivery"))
    for request in (
        _head("POST", ingest_path, "Content-Length: 10") + b"{}",
        _head("POST", ingest_path, "Content-Length: 2", "Expect: 200-ok") + b"{}",
    ):
        _exchange(server.port, request)
    time.sleep(0.2)
    lines = _log(server, "switchboard.delivery")[logged:]
    assert sorted(d["status"] for d in lines) == [408, 417], lines
    assert all(d["source"] == "unknown" and d["webhook_id"] is None for d in lines)
    assert {s: _counted(server, s) for s in before} == {s: n + 1 for s, n in before.items()}


def test_a_get_with_a_harmless_body_logs_no_error(server: Server) -> None:
    # Each GET with a body, then a second request on the same connection.
    follow = _head("GET", "/healthz", "Connection: close")
    for first in (
        _head("GET", "/metrics", "Content-Length: 0"),
        _head("GET", "/metrics", "Content-Length: 5") + b"hello",
        _head("GET", "/healthz", "Content-Length: 5") + b"hello",
        _head("GET", "/healthz", "Transfer-Encoding: chunked") + b"5\r\nhello\r\n0\r\n\r\n",
    ):
        _, got, closed = _exchange(server.port, first + follow)
        assert closed and got.count(b"HTTP/1.1 200 ") == 2, got[:300]
    time.sleep(0.2)
    errors = [d for d in _log(server) if d["level"] in ("error", "critical")]
    assert not errors, errors
    assert "body not consumed" not in server.log.read_text()


def test_a_target_the_url_parser_refuses_is_a_400_never_a_traceback(
    server: Server, ingest_path: str
) -> None:
    # A control byte in the path, no leading "/", a raw non-ASCII byte: each a 400 with
    # the one error shape, then closed; nothing logged as an error.
    logged = len(_log(server))
    targets = [
        ingest_path.encode() + b"\x00",
        ingest_path.encode() + b"\x01x",
        b"/healthz\x7f",
        b"healthz",
        b"?a",
        b"#a",
        b"http://",
        b"/healthz\xff",
    ]
    for target in targets:
        for method, tail in ((b"GET", b""), (b"POST", b"Content-Length: 2\r\n\r\n{}")):
            request = method + b" " + target + b" HTTP/1.1\r\nHost: x\r\n"
            request += tail or b"\r\n"
            _, got, closed = _exchange(server.port, request)
            assert closed and _reply(got) == (400, error_body(400)), (target, got[:300])
    # the server still answers
    assert httpx.get(server.base_url + "/healthz", timeout=10).status_code == 200
    time.sleep(0.2)
    errors = [d for d in _log(server)[logged:] if d["level"] in ("error", "critical")]
    assert not errors, errors
    assert "Traceback" not in server.log.read_text()
    assert ingest_path.rsplit("/", 1)[1] not in server.log.read_text()


@pytest.mark.parametrize(
    "framing",
    [
        "Content-Length: \u0662",  # an Arabic-Indic 2: int() reads it, a proxy would not
        "Content-Length: \u00b2",
        "Content-Length: \uff12",
        "Transfer-Encoding: chunked",
    ],
)
def test_a_length_of_other_than_ascii_digits_is_a_400(
    server: Server, ingest_path: str, framing: str
) -> None:
    # The chunked body's size is the same Arabic-Indic 2, in UTF-8.
    body = b"\xd9\xa2\r\n{}\r\n0\r\n\r\n" if "chunked" in framing else b"{}"
    request = _head("POST", ingest_path, framing, "Connection: close") + body
    _, got, closed = _exchange(server.port, request)
    assert closed and _reply(got) == (400, error_body(400)), got[:300]
