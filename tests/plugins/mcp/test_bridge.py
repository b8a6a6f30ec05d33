"""The Sanic-to-ASGI bridge: streamed SSE responses, client disconnects, and methods."""

from __future__ import annotations

import json
from typing import Any

import httpx

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
        # A quiet event stream still gets its headers at once; closing it is a disconnect
        # the SDK app hears (http.disconnect), again and again without leaking.
        for _ in range(20):
            async with http.stream("GET", people.url, headers=headers) as get:
                assert get.status_code == 200
                assert get.headers["content-type"].startswith("text/event-stream")
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
