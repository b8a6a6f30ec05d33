"""The Sanic-to-ASGI bridge: streamed SSE responses, client disconnects, methods, and header
bytes both ways."""

from __future__ import annotations

import json
import socket
from types import SimpleNamespace
from typing import Any

import httpx
from sanic.response import HTTPResponse
from switchboard_mcp.bridge import _Exchange

ACCEPT = "application/json, text/event-stream"
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}


async def test_streams_and_disconnects(people: Any) -> None:
    ep = await people.vend(people.alice, "owner")
    headers = {
        "Authorization": f"Bearer {ep['token']}",
        "Accept": ACCEPT,
        "MCP-Protocol-Version": "2025-06-18",
    }
    async with httpx.AsyncClient(timeout=10) as http:
        # No stream of the server's own (stateless: nothing could come on it), so none is
        # held open without a deadline: MCP's 405, before any token is read.
        got = await http.get(people.url, headers=headers)
        assert got.status_code == 405 and "GET" not in got.headers["allow"]
        assert got.json() == {"error": "method not allowed", "code": "method_not_allowed"}
        # A client that drops a streamed answer is a disconnect the SDK app hears
        # (http.disconnect), again and again without leaking.
        for _ in range(20):
            async with http.stream("POST", people.url, json=INIT, headers=headers) as resp:
                assert resp.status_code == 200
                assert resp.headers["content-type"].startswith("text/event-stream")
        # Stateless: there is no session to delete.
        assert (await http.delete(people.url, headers=headers)).status_code == 405
        # A POST answers with an SSE stream, streamed through request.respond().
        async with http.stream("POST", people.url, json=INIT, headers=headers) as resp:
            assert resp.status_code == 200 and resp.headers["transfer-encoding"] == "chunked"
            text = "".join([chunk async for chunk in resp.aiter_text()])
        data = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
        assert json.loads(data)["result"]["serverInfo"]["name"] == "switchboard"
        # A client that drops a POST mid-response leaves the server serving.
        async with http.stream("POST", people.url, json=INIT, headers=headers) as resp:
            assert resp.status_code == 200
        health = await http.get(people.srv.base_url + "/healthz")
        assert health.json()["status"] == "ok"
        plain = await http.post(people.url, json=INIT, headers=dict(headers, Accept="text/html"))
        assert plain.status_code == 406


def _raw_post(port: int, *headers: bytes, body: bytes) -> tuple[bytes, dict[bytes, bytes], bytes]:
    """POST /mcp over a raw socket, header bytes exactly as given: (status line, headers,
    body as sent, chunked or not)."""
    head = [
        b"POST /mcp HTTP/1.1",
        b"Host: 127.0.0.1:%d" % port,
        b"Accept: " + ACCEPT.encode(),
        b"Content-Length: %d" % len(body),
        b"Connection: close",
        *headers,
    ]
    got = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"\r\n".join(head) + b"\r\n\r\n" + body)
        while chunk := sock.recv(65536):
            got += chunk
    top, _, rest = got.partition(b"\r\n\r\n")
    status, *lines = top.split(b"\r\n")
    fields = dict(line.split(b": ", 1) for line in lines)
    return status, {k.lower(): v for k, v in fields.items()}, rest


async def test_header_bytes_beyond_latin_1_reach_the_app_intact(people: Any) -> None:
    """Sanic reads a header as UTF-8 (surrogateescape): a UTF-8 User-Agent is served, and a
    token that is not UTF-8 at all is just a wrong token, never a 500."""
    ep = await people.vend(people.alice, "bytes")
    port = people.srv.port
    body = json.dumps(INIT).encode()
    bearer = b"Authorization: Bearer " + ep["token"].encode()
    json_body = b"Content-Type: application/json"
    status, _, reply = _raw_post(
        port, bearer, json_body, b"User-Agent: client \xe2\x9c\x93", body=body
    )
    assert status == b"HTTP/1.1 200 OK", (status, reply)
    assert b'"serverInfo":{"name":"switchboard"' in reply
    for token in (b"\xff\xfe", b"\xe2\x9c\x93", ep["token"].encode() + b"\xe9"):
        status, fields, reply = _raw_post(
            port, b"Authorization: Bearer " + token, json_body, body=body
        )
        assert status.startswith(b"HTTP/1.1 401 "), (token, status, reply)
        assert json.loads(reply)["error"] == "invalid_token"
        assert fields[b"www-authenticate"].startswith(b"Bearer")


async def test_a_response_without_a_content_type_gets_no_made_up_one(people: Any) -> None:
    ep = await people.vend(people.alice, "ctype")
    bearer = b"Authorization: Bearer " + ep["token"].encode()
    status, fields, reply = _raw_post(
        people.srv.port, bearer, b"Content-Type: text/plain", body=json.dumps(INIT).encode()
    )
    assert status.startswith(b"HTTP/1.1 400 "), (status, reply)
    assert b"Invalid Content-Type header" in reply
    # the SDK named no content type; Sanic used to write the Python repr "None"
    assert fields[b"content-type"] == b"application/octet-stream"


async def test_an_apps_header_bytes_go_out_as_the_app_sent_them() -> None:
    """Any byte an ASGI app puts in a header is written back unchanged (Latin-1 text would
    go out re-encoded as UTF-8, two bytes for one)."""

    async def respond(**kw: Any) -> HTTPResponse:  # what Sanic's request.respond builds
        return HTTPResponse(**kw)

    request: Any = SimpleNamespace(respond=respond)
    exchange = _Exchange(request)
    sent = [(b"content-type", b"text/plain"), (b"x-note", b"\xe2\x9c\x93"), (b"x-raw", b"\xe9")]
    exchange.start = {"type": "http.response.start", "status": 200, "headers": sent}
    await exchange._respond()
    assert sorted(exchange.response.processed_headers) == sorted(sent)
