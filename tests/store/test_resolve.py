"""Token resolution in batches: one query for every waiting token, each caller its own answer."""

from __future__ import annotations

import asyncio
from typing import Any

from sbdeliveries import generic_webhook

from switchboard.runtime import Runtime
from switchboard.secrets_box import hash_token
from switchboard.service import webhooks


def _count_queries(rt: Runtime) -> list[list[str]]:
    """The hash lists of every resolution query the store sends from now on (a lone hash
    goes through the single-token statement, a crowd through the batch one)."""
    seen: list[list[str]] = []
    fetchall, fetchone = rt.store.db.fetchall, rt.store.db.fetchone

    async def many(sql: str, params: Any = (), **kw: Any) -> Any:
        if isinstance(params, dict) and "hashes" in params:
            seen.append(list(params["hashes"]))
        return await fetchall(sql, params, **kw)

    async def one(sql: str, params: Any = ()) -> Any:
        if isinstance(params, dict) and set(params) == {"h"}:
            seen.append([params["h"]])
        return await fetchone(sql, params)

    rt.store.db.fetchall = many  # type: ignore[method-assign]
    rt.store.db.fetchone = one  # type: ignore[method-assign]
    return seen


async def test_concurrent_resolutions_share_one_query_and_get_their_own_rows(
    runtime: Runtime,
) -> None:
    one, one_token = await generic_webhook(runtime, "one")
    two, two_token = await generic_webhook(runtime, "two")
    queries = _count_queries(runtime)
    asked = [one_token, two_token, "no-such-token", one_token, two_token, one_token]
    got = await asyncio.gather(*[runtime.store.resolve_webhook(hash_token(t)) for t in asked])
    # The first waits one turn of the loop, in which the other five ask: one query for
    # all six, each distinct hash once.
    assert len(queries) == 1
    assert sorted(queries[0]) == sorted({hash_token(t) for t in asked})
    assert [r and r["id"] for r in got] == [
        one["webhook_id"],
        two["webhook_id"],
        None,
        one["webhook_id"],
        two["webhook_id"],
        one["webhook_id"],
    ]
    # The same answer as a lone lookup, column for column, without the batch's own columns.
    alone = await runtime.store.resolve_webhook_by_id(one["webhook_id"])
    assert got[0] == alone and got[3] == alone
    # Callers of the same token never share a document (stages adopt them uncopied).
    assert got[0] is not got[3] and got[0]["targets"] is not got[3]["targets"]
    assert got[3] == got[5] and got[3] is not got[5]  # one query answered both
    for key in ("routing", "targets", "owner_webhook_queues"):
        assert got[3][key] is not got[5][key]
    assert got[3]["targets"][0] is not got[5]["targets"][0]  # deep, not a shallow copy
    # Afterwards a lone lookup is its own (smaller) batch.
    assert (await runtime.store.resolve_webhook(hash_token(two_token)))["id"] == two["webhook_id"]
    assert len(queries) == 2 and queries[1] == [hash_token(two_token)]


async def test_the_batch_cap_splits_a_crowd(runtime: Runtime) -> None:
    hook, token = await generic_webhook(runtime, "capped")
    runtime.store.resolver.max_size = 3
    queries = _count_queries(runtime)
    got = await asyncio.gather(
        *[runtime.store.resolve_webhook(hash_token(token)) for _ in range(7)]
    )
    assert {r["id"] for r in got if r} == {hook["webhook_id"]} and len(got) == 7
    assert [len(q) for q in queries] == [1, 1, 1]  # 3 + 3 + 1 callers, one hash each


async def test_the_previous_token_resolves_only_inside_its_window(runtime: Runtime) -> None:
    hook, old = await generic_webhook(runtime, "rotated")
    row = await runtime.store.get_webhook(hook["webhook_id"])
    assert row is not None
    owner = await runtime.store.get_endpoint(row["endpoint_id"])
    new = (await webhooks.rotate_webhook(runtime, owner, hook["webhook_id"]))["ingest_url"]
    new = new.rsplit("/", 1)[-1]
    store = runtime.store
    previous, current = await asyncio.gather(
        store.resolve_webhook(hash_token(old)), store.resolve_webhook(hash_token(new))
    )
    assert previous is not None and current is not None
    assert previous["id"] == current["id"] == hook["webhook_id"]
    assert previous["in_overlap"] is True
    # The window closes (as if 24 hours had passed): the old token is unknown at once.
    await store.db.fetchone(
        "UPDATE endpoint_webhooks SET previous_until = now() - interval"
        " '1 second' WHERE id = %s RETURNING id",
        (hook["webhook_id"],),
    )
    previous, current = await asyncio.gather(
        store.resolve_webhook(hash_token(old)), store.resolve_webhook(hash_token(new))
    )
    assert previous is None
    assert current is not None and current["in_overlap"] is False
    assert current["previous_secret_enc"] is None


async def test_resolution_uses_the_token_indexes(runtime: Runtime) -> None:
    """Both arms of the batch query are index lookups, not scans of every webhook."""
    from switchboard.store.webhooks import _RESOLVE_MANY

    async with runtime.store.db.conn() as conn:
        await conn.execute("SET enable_seqscan = off")  # a table this small would be scanned
        cur = await conn.execute("EXPLAIN " + _RESOLVE_MANY, {"hashes": ["a", "b"]})
        plan = "\n".join(r["QUERY PLAN"] for r in await cur.fetchall())
        await conn.execute("RESET enable_seqscan")
    assert "endpoint_webhooks_ingest_token_hash_key" in plan, plan
    assert "endpoint_webhooks_previous_token_hash_idx" in plan, plan


async def test_a_routing_document_is_parsed_once_and_each_delivery_gets_its_own(
    runtime: Runtime, monkeypatch: Any
) -> None:
    from switchboard.service import rules as rules_service
    from switchboard.store import webhooks as store_webhooks

    hook, token = await generic_webhook(runtime, "docs")
    rule = {"name": "r", "expr": '.kind == "x"', "action": {"queue": "inbox"}}
    await rules_service.set_rules(runtime, None, hook["webhook_id"], [rule])
    parsed: list[str] = []
    loads = store_webhooks.json.loads
    monkeypatch.setattr(
        store_webhooks.json, "loads", lambda text, **kw: parsed.append(text) or loads(text, **kw)
    )
    first = await runtime.store.resolve_webhook(hash_token(token))
    assert [loads(t) for t in parsed] == [first["routing"]]  # parsed once, here
    second = await runtime.store.resolve_webhook(hash_token(token))
    assert first["routing"] == second["routing"] and first["routing"] is not second["routing"]
    assert len(parsed) == 1  # not again
    first["routing"]["rules"][0]["expr"] = "tampered"  # a stage that mutates its copy
    third = await runtime.store.resolve_webhook(hash_token(token))
    assert third["routing"]["rules"][0]["expr"] == '.kind == "x"'
    # a saved change is the next delivery's document: the text is the key
    await rules_service.set_rules(runtime, None, hook["webhook_id"], [{**rule, "expr": "true"}])
    fourth = await runtime.store.resolve_webhook(hash_token(token))
    assert fourth["routing"]["rules"][0]["expr"] == "true"
    assert (await runtime.store.resolve_webhook_by_id(hook["webhook_id"]))["routing"] == fourth[
        "routing"
    ]


def test_remembered_routing_documents_stay_within_their_budget(monkeypatch: Any) -> None:
    import json

    from switchboard.store import webhooks as store_webhooks

    monkeypatch.setattr(store_webhooks, "_DOCS", {})
    monkeypatch.setattr(store_webhooks, "_docs_bytes", 0)
    monkeypatch.setattr(store_webhooks, "DOCS_BUDGET", 64 * 1024)
    docs = [json.dumps({"rules": [{"expr": f".n == {i}", "pad": "x" * 900}]}) for i in range(200)]
    for text in docs:
        assert store_webhooks._routing_doc(text) == json.loads(text)
        kept = store_webhooks._DOCS
        assert sum(len(t) + len(b) for t, b in kept.items()) == store_webhooks._docs_bytes
        assert store_webhooks._docs_bytes <= 64 * 1024
    assert docs[-1] in store_webhooks._DOCS and docs[0] not in store_webhooks._DOCS
    huge = json.dumps({"rules": [{"expr": "true", "pad": "x" * 20000}]})  # over budget / 8
    assert store_webhooks._routing_doc(huge) == json.loads(huge)
    assert huge not in store_webhooks._DOCS
    assert store_webhooks._routing_doc(None) is None
