"""``list_webhook_refusals``: a producer's refused deliveries, seen by the webhook's owner."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import httpx

from switchboard.cli.send import build_request

SECRET = "mcp-refusal-secret-0123456789abcdef"


async def _until_total(a: Any, webhook_id: str, total: int, **kw: Any) -> dict[str, Any]:
    """The tool's answer once the server has recorded ``total`` refusals (recorded after the 401)."""
    deadline = time.monotonic() + 20
    while True:
        got = await a.call("list_webhook_refusals", webhook_id=webhook_id, **kw)
        if got["total"] >= total or time.monotonic() > deadline:
            return got
        await asyncio.sleep(0.1)


def _post(url: str, body: bytes, headers: dict[str, str]) -> int:
    return httpx.post(url, content=body, headers=headers, timeout=30).status_code


def _cairn(at: float) -> bytes:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
    return json.dumps(
        {"kind": "artifact.created", "event_id": str(uuid.uuid4()), "created_at": stamp}
    ).encode()


async def test_wrong_secret_stale_timestamp_and_missing_header_each_show_their_code(
    people: Any, connect: Any
) -> None:
    owner = await people.vend(people.alice, "owner")
    stranger = await people.vend(people.bob, "stranger")
    async with connect(people.url, owner["token"]) as a:
        gh = await a.call(
            "create_webhook", source_type="github", target_queue="inbox", signing_secret=SECRET
        )
        cairn = await a.call(
            "create_webhook", source_type="cairn", target_queue="inbox", signing_secret=SECRET
        )
        body, wrong = build_request(
            "github", b'{"action": "opened"}', b"the-wrong-secret-000000", "issues", {}, False
        )
        wrong["X-GitHub-Delivery"] = "wrong-secret-1"
        assert _post(gh["ingest_url"], body, wrong) == 401
        missing = {k: v for k, v in wrong.items() if k != "X-Hub-Signature-256"}
        missing["X-GitHub-Delivery"] = "missing-header-1"
        assert _post(gh["ingest_url"], body, missing) == 401
        stale_body, stale = build_request(
            "cairn", _cairn(time.time() - 7200), SECRET.encode(), None, {}, False
        )
        assert _post(cairn["ingest_url"], stale_body, stale) == 401

        got = await _until_total(a, gh["webhook_id"], 2)
        assert got["total"] == 2 and got["kept"] == 100
        reasons = {r["delivery_id"]: r["reason"] for r in got["refusals"]}
        assert reasons == {"wrong-secret-1": "mismatch", "missing-header-1": "missing_header"}
        first = got["refusals"][0]
        assert first["source_ip"] == "127.0.0.1" and first["size"] == len(body)
        assert wrong["X-Hub-Signature-256"] not in json.dumps(got)
        stale_got = await _until_total(a, cairn["webhook_id"], 1)
        assert [r["reason"] for r in stale_got["refusals"]] == ["stale_timestamp"]
        # the producer-facing reply said none of it
        reply = httpx.post(gh["ingest_url"], content=body, headers=wrong, timeout=30)
        assert reply.status_code == 401
        assert "mismatch" not in reply.text and "secret" not in reply.text.replace(
            "signature verification failed", ""
        )

    async with connect(people.url, stranger["token"]) as b:
        err = await b.fails("list_webhook_refusals", webhook_id=gh["webhook_id"])
        assert err.code == "not_found"


async def test_a_real_http_flood_keeps_the_last_hundred(people: Any, connect: Any) -> None:
    owner = await people.vend(people.alice, "flooded")
    async with connect(people.url, owner["token"]) as a:
        gh = await a.call(
            "create_webhook", source_type="github", target_queue="inbox", signing_secret=SECRET
        )
        flood = 250
        async with httpx.AsyncClient(timeout=30) as http:
            for start in range(0, flood, 50):
                replies = await asyncio.gather(
                    *(
                        http.post(
                            gh["ingest_url"],
                            content=b"{}",
                            headers={
                                "X-GitHub-Delivery": f"forged-{i}",
                                "X-Hub-Signature-256": "sha256=" + "0" * 64,
                            },
                        )
                        for i in range(start, start + 50)
                    )
                )
                assert {r.status_code for r in replies} == {401}
        got = await _until_total(a, gh["webhook_id"], flood, limit=100)
        assert got["total"] == flood
        assert len(got["refusals"]) == 100
        assert {r["reason"] for r in got["refusals"]} == {"mismatch"}
    rows = await people.rt.store.db.fetchone(
        "SELECT count(*) AS n FROM webhook_refusals WHERE webhook_id = %s", (gh["webhook_id"],)
    )
    assert rows is not None and rows["n"] == 100
