"""The drain verbs over MCP: basics, and ten workers racing claim_next."""

from __future__ import annotations

import asyncio
import json
from contextlib import AsyncExitStack
from typing import Any

import httpx
import pytest


async def _deliveries(people: Any, connect: Any, token: str, n: int) -> str:
    """Create a generic webhook over MCP and post ``n`` deliveries to it."""
    async with connect(people.url, token) as a:
        hook = await a.call("create_webhook", source_type="generic", target_queue="inbox")
    async with httpx.AsyncClient(timeout=30) as http:
        resps = await asyncio.gather(
            *[
                http.post(
                    hook["ingest_url"], content=b'{"n": %d}' % i, headers={"X-Delivery-Id": f"d{i}"}
                )
                for i in range(n)
            ]
        )
    assert all(r.status_code == 202 and r.json()["created"] == 1 for r in resps)
    return str(hook["webhook_id"])


@pytest.mark.slow
async def test_ten_workers_race_for_ten_todos(people: Any, connect: Any) -> None:
    ep = await people.vend(people.alice, "lane", queues="inbox")
    await _deliveries(people, connect, ep["token"], 10)
    async with AsyncExitStack() as stack:
        workers = [
            await stack.enter_async_context(connect(people.url, ep["token"])) for _ in range(10)
        ]
        got = await asyncio.gather(*[w.call("claim_next") for w in workers])
        ids = [g["todo"]["todo_id"] for g in got]
        assert len(set(ids)) == 10
        assert all(g["todo"]["attempts"] == 1 for g in got)
        assert (await workers[0].call("claim_next")) == {"empty": True}


async def test_drain_verbs_over_mcp(people: Any, connect: Any) -> None:
    ep = await people.vend(people.alice, "worker", queues="inbox")
    other = await people.vend(people.bob, "other", queues="inbox")
    await _deliveries(people, connect, ep["token"], 2)
    async with connect(people.url, ep["token"]) as a, connect(people.url, other["token"]) as b:
        listed = (await a.call("list_todos"))["todos"]
        assert len(listed) == 2 and {t["state"] for t in listed} == {"pending"}
        assert (await b.call("list_todos")) == {"todos": []}
        first, second = (t["todo_id"] for t in listed)

        assert (await b.fails("claim", id=first)).code == "not_found"
        assert (await a.fails("list_todos", queue="handoff")).code == "forbidden"
        assert (await a.fails("claim_next", queue="handoff")).code == "forbidden"

        claimed = (await a.call("claim", id=first))["todo"]
        assert claimed["state"] == "claimed" and claimed["payload"]["payload"]["n"] in (0, 1)
        assert claimed["routing_trace"]["stage"] == "default" and "work_order" in claimed
        assert (await a.fails("claim", id=first)).code == "conflict"
        beat = await a.call("heartbeat", id=first)
        assert beat["todo_id"] == first and beat["lease_expires_at"]
        assert (await b.fails("heartbeat", id=first)).code == "not_found"
        failed = (await a.call("fail", id=first, result={"why": "flaky"}))["todo"]
        assert failed["state"] == "pending" and failed["result"] == {"why": "flaky"}
        assert (await a.fails("complete", id=first)).code == "conflict"

        nxt = await a.call("claim_next", queue="inbox")
        assert nxt["todo"]["todo_id"] == second  # the failed one is backing off
        done = (await a.call("complete", id=second, result="ok"))["todo"]
        assert done["state"] == "done" and done["result"] == "ok"
        assert [t["todo_id"] for t in (await a.call("list_todos", state="done"))["todos"]] == [
            second
        ]
        assert (await a.fails("list_todos", limit=0)).code == "invalid_argument"
        assert (await a.fails("claim", id="nope")).code == "not_found"
        # every verb that takes an id: one that is no todo's id is not found, never internal
        for verb in ("heartbeat", "complete", "fail", "retry"):
            refused = await a.fails(verb, id="nope")
            assert refused.text == "not_found: todo nope not found"


async def test_a_large_payload_is_claimed_and_read_in_pages(people: Any, connect: Any) -> None:
    """A delivery of ~1.5 MB: its claim answers (payload: null, payload_paged), where the
    whole payload in the answer broke a stock client's 1 MiB event limit after the claim had
    committed; the pages, joined, are the payload a small todo's claim carries."""
    ep = await people.vend(people.alice, "bulk", queues="inbox")
    async with connect(people.url, ep["token"]) as a:
        hook = await a.call("create_webhook", source_type="generic", target_queue="inbox")
    blob = 'é"\\' + "x" * (1536 * 1024)  # escaping and non-ASCII across page edges
    async with httpx.AsyncClient(timeout=30) as http:
        for i, body in enumerate(({"blob": blob}, {"small": True})):
            resp = await http.post(
                hook["ingest_url"],
                content=json.dumps(body).encode(),
                headers={"X-Delivery-Id": f"big{i}"},
            )
            assert resp.status_code == 202
    async with connect(people.url, ep["token"]) as a:
        big = (await a.call("claim_next"))["todo"]
        assert big["payload"] is None and big["attempts"] == 1
        paged = big["payload_paged"]
        assert paged["pages"] == -(-paged["bytes"] // paged["page_chars"]) > 1
        pages = [
            await a.call("get_todo_payload", id=big["id"], page=n) for n in range(paged["pages"])
        ]
        assert {p["pages"] for p in pages} == {paged["pages"]}
        payload = json.loads("".join(p["text"] for p in pages))
        assert payload["payload"] == {"blob": blob}
        refused = await a.fails("get_todo_payload", id=big["id"], page=paged["pages"])
        assert refused.text == (
            f"invalid_argument: page: must be an integer from 0 to {paged['pages'] - 1}"
            f" (this todo has {paged['pages']})"
        )
        small = (await a.call("claim_next"))["todo"]
        assert small["payload"]["payload"] == {"small": True} and "payload_paged" not in small
        [one] = [await a.call("get_todo_payload", id=small["id"])]
        assert json.loads(one["text"]) == small["payload"] and one["pages"] == 1
        done = (await a.call("complete", id=big["id"]))["todo"]
        assert done["state"] == "done" and done["payload_paged"] == paged
    async with connect(
        people.url, (await people.vend(people.bob, "x", queues="inbox"))["token"]
    ) as b:
        assert (await b.fails("get_todo_payload", id=big["id"])).code == "not_found"


async def test_a_worker_whose_lease_ran_out_cannot_act_for_the_claim_taken_since(
    people: Any, connect: Any
) -> None:
    """Two workers on one endpoint's token (a pool): the first's lease runs out and the
    second claims the same todo. Presenting its claim_id, the first can no longer complete,
    fail or extend the todo (conflict, naming its claim); the second completes it with its
    own. Without a claim_id, any claim of the endpoint's is acted on, as before."""
    ep = await people.vend(people.alice, "pool", queues="inbox")
    await _deliveries(people, connect, ep["token"], 2)
    async with connect(people.url, ep["token"]) as one, connect(people.url, ep["token"]) as two:
        first = (await one.call("claim_next", lease_ttl_seconds=0.5))["todo"]
        assert first["claim_id"] and first["attempts"] == 1
        await asyncio.sleep(0.8)
        again = (await two.call("claim", id=first["todo_id"]))["todo"]
        assert again["claim_id"] != first["claim_id"] and again["attempts"] == 2
        stale = {"id": first["todo_id"], "claim_id": first["claim_id"]}
        for verb, args in (
            ("heartbeat", stale),
            ("fail", {**stale, "result": "late"}),
            ("complete", {**stale, "result": "late"}),
        ):
            refused = await one.fails(verb, **args)
            assert refused.code == "conflict", (verb, refused)
            assert first["claim_id"] in refused.text and "claimed again" in refused.text
        beat = await two.call("heartbeat", id=again["todo_id"], claim_id=again["claim_id"])
        assert beat["claim_id"] == again["claim_id"]
        done = (await two.call("complete", id=again["todo_id"], claim_id=again["claim_id"],
                               result="ok"))["todo"]  # fmt: skip
        assert (done["state"], done["result"]) == ("done", "ok")  # not the stale "late"
        assert (await one.fails("complete", id="x", claim_id="nope")).code == "invalid_argument"
        # without a claim_id: the endpoint's claim, whichever worker took it
        other = (await one.call("claim_next"))["todo"]
        assert (await two.call("complete", id=other["todo_id"]))["todo"]["state"] == "done"
