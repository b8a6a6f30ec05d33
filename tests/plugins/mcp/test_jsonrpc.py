"""Invalid JSON-RPC envelopes get an Invalid Request error, over HTTP and stdio, never silence."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

SWITCHBOARD = str(Path(sys.executable).with_name("switchboard"))
ACCEPT = "application/json, text/event-stream"
VERSION = "2025-06-18"
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": VERSION,
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}

#: Request ids JSON-RPC (or MCP, which narrows them to strings and integers) rules out.
BAD_IDS: list[Any] = [{"a": 1}, [1], True, False, 1.5, 1.0, None]
#: Bodies that are not one JSON-RPC object.
NOT_ONE_MESSAGE: list[Any] = [[INIT], [], 5, "tools/list", None]


def listing(request_id: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/list"}


def invalid_request(reply: Any) -> bool:
    return (
        isinstance(reply, dict)
        and reply.get("jsonrpc") == "2.0"
        and "id" in reply
        and reply["id"] is None
        and reply["error"]["code"] == -32600
        and reply["error"]["message"].startswith("Invalid Request: ")
    )


async def _post(http: httpx.AsyncClient, url: str, token: str, body: Any) -> httpx.Response:
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": ACCEPT,
        "Content-Type": "application/json",
        "MCP-Protocol-Version": VERSION,
    }
    return await http.post(url, content=json.dumps(body), headers=headers)


async def test_bad_ids_and_batches_get_invalid_request_over_http(people: Any) -> None:
    ep = await people.vend(people.alice, "rpc")
    async with httpx.AsyncClient(timeout=10) as http:
        for body in [listing(i) for i in BAD_IDS] + NOT_ONE_MESSAGE:
            resp = await _post(http, people.url, ep["token"], body)
            assert resp.status_code == 400, (body, resp.status_code, resp.text)
            assert resp.headers["content-type"].startswith("application/json")
            assert invalid_request(resp.json()), (body, resp.text)
        # Unparseable JSON keeps the SDK's answer: 400 and a parse error.
        resp = await http.post(
            people.url,
            content=b"{",
            headers={
                "Authorization": f"Bearer {ep['token']}",
                "Accept": ACCEPT,
                "Content-Type": "application/json",
                "MCP-Protocol-Version": VERSION,
            },
        )
        assert resp.status_code == 400 and resp.json()["error"]["code"] == -32700
        # Valid ids, a notification and a client's error reply are served as before.
        for good in ("abc", 7):
            resp = await _post(http, people.url, ep["token"], listing(good))
            assert resp.status_code == 200, resp.text
            data = next(line[5:] for line in resp.text.splitlines() if line.startswith("data:"))
            assert json.loads(data)["id"] == good
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await _post(http, people.url, ep["token"], note)).status_code == 202
        reply = {"jsonrpc": "2.0", "id": None, "error": {"code": -1, "message": "no"}}
        assert (await _post(http, people.url, ep["token"], reply)).status_code == 202


@pytest.fixture
async def stdio(people: Any) -> Any:
    """``switchboard mcp --token`` as a child, initialized, speaking raw JSON lines."""
    ep = await people.vend(people.alice, "rpc-stdio", verbs="list_webhooks")
    proc = await asyncio.create_subprocess_exec(
        SWITCHBOARD,
        "mcp",
        "--token",
        ep["token"],
        env=people.srv.env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert proc.stdin is not None and proc.stdout is not None

    async def send(line: str) -> None:
        assert proc.stdin is not None
        proc.stdin.write(line.encode() + b"\n")
        await proc.stdin.drain()

    async def receive() -> Any:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert line, "the server closed stdout"
        return json.loads(line)

    try:
        await send(json.dumps(INIT))
        assert (await receive())["id"] == 1
        await send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        yield send, receive
    finally:
        proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 20)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def test_bad_ids_and_batches_get_invalid_request_over_stdio(stdio: Any) -> None:
    send, receive = stdio
    for body in [listing(i) for i in BAD_IDS] + NOT_ONE_MESSAGE:
        await send(json.dumps(body))
        reply = await receive()
        assert invalid_request(reply), (body, reply)
    await send("{not json")
    reply = await receive()
    assert reply["id"] is None and reply["error"]["code"] == -32700
    # The session is still being served.
    await send(json.dumps(listing(2)))
    reply = await receive()
    assert reply["id"] == 2
    assert [t["name"] for t in reply["result"]["tools"]] == ["list_webhooks"]
