"""Webhook credentials: the ingest token is shown once and stored only as its hash."""

from __future__ import annotations

import asyncio
import json

import pytest

from switchboard.errors import Forbidden, NotFound
from switchboard.runtime import Runtime
from switchboard.secrets_box import hash_token
from switchboard.service import identity, webhooks
from switchboard.service.ingest import ingest
from switchboard.sources import Headers


async def _owner(rt: Runtime) -> dict:
    await identity.add_human(rt, "alice")
    made = await identity.vend_endpoint(
        rt,
        owner="alice",
        name="owner",
        queues=["inbox"],
        webhook_queues=["inbox"],
        source_types=["generic", "github"],
        webhook_max=4,
    )
    return await rt.store.get_endpoint(made["endpoint_id"])


def _token(created: dict) -> str:
    return str(created["ingest_url"]).rsplit("/", 1)[1]


async def _post(rt: Runtime, token: str, delivery: str) -> int:
    reply = await ingest(rt, token, Headers({"X-Delivery-Id": delivery}), b"{}", "application/json")
    return reply.status


async def test_the_ingest_token_is_stored_only_as_its_hash(runtime: Runtime) -> None:
    owner = await _owner(runtime)
    created = await webhooks.create_webhook(runtime, owner, "github", "inbox")
    token = _token(created)
    rows = await runtime.store.db.fetchall(
        "SELECT row_to_json(w)::text AS doc FROM endpoint_webhooks w"
    )
    stored = rows[0]["doc"]
    assert token not in stored and hash_token(token) in stored
    assert created["signing_secret"] not in stored
    # Listing never shows the token again (nor a URL that would carry it).
    listed = await webhooks.list_webhooks(runtime, owner)
    assert token not in json.dumps(listed)
    assert "ingest_url" not in listed["webhooks"][0]
    assert listed["webhooks"][0]["webhook_id"] == created["webhook_id"]


async def _end_overlap(rt: Runtime, webhook_id: str) -> None:
    await rt.store.db.fetchone(
        "UPDATE endpoint_webhooks SET previous_until = now() - interval '1 second'"
        " WHERE id = %s RETURNING id",
        (webhook_id,),
    )


async def test_deliveries_find_the_webhook_by_the_hash_and_rotation_retires_the_old_token(
    runtime: Runtime,
) -> None:
    owner = await _owner(runtime)
    created = await webhooks.create_webhook(runtime, owner, "generic", "inbox")
    old = _token(created)
    assert await _post(runtime, old, "d1") == 202
    assert await _post(runtime, hash_token(old), "d2") == 404  # the hash is no credential
    rotated = await webhooks.rotate_webhook(runtime, owner, created["webhook_id"])
    new = _token(rotated)
    assert new != old and rotated["previous_until"]
    assert await _post(runtime, old, "d3") == 202  # inside the overlap window
    assert await _post(runtime, new, "d4") == 202
    await _end_overlap(runtime, created["webhook_id"])
    assert await _post(runtime, old, "d5") == 404  # after it
    assert await _post(runtime, new, "d6") == 202


async def test_a_second_rotation_retires_the_first_token_at_once(runtime: Runtime) -> None:
    owner = await _owner(runtime)
    created = await webhooks.create_webhook(runtime, owner, "generic", "inbox")
    first = _token(created)
    second = _token(await webhooks.rotate_webhook(runtime, owner, created["webhook_id"]))
    third = _token(await webhooks.rotate_webhook(runtime, owner, created["webhook_id"]))
    assert await _post(runtime, first, "d1") == 404  # two old generations never live at once
    assert await _post(runtime, second, "d2") == 202
    assert await _post(runtime, third, "d3") == 202


async def test_no_overlap_when_the_operator_sets_none(runtime: Runtime) -> None:
    runtime.config.raw["ingest"]["rotation_overlap_hours"] = 0
    owner = await _owner(runtime)
    created = await webhooks.create_webhook(runtime, owner, "generic", "inbox")
    old = _token(created)
    rotated = await webhooks.rotate_webhook(runtime, owner, created["webhook_id"])
    assert rotated["previous_until"] is None
    assert await _post(runtime, old, "d1") == 404
    assert await _post(runtime, _token(rotated), "d2") == 202


async def test_a_webhook_deleted_meanwhile_is_not_found_not_an_error(runtime: Runtime) -> None:
    """A rotation or a route whose webhook was deleted after the caller's ownership check
    answers not_found (404), never an internal error."""
    owner = await _owner(runtime)
    hook = (await webhooks.create_webhook(runtime, owner, "github", "inbox"))["webhook_id"]
    await webhooks.delete_webhook(runtime, owner, hook)
    with pytest.raises(NotFound):
        await runtime.store.rotate_webhook(hook, hash_token("fresh"), None, 60)
    with pytest.raises(NotFound):
        await runtime.store.add_route(
            hook,
            str(owner["id"]),
            None,
            owner_human=owner["owner_human"],
            target_human=owner["owner_human"],
        )


async def test_a_route_never_outlives_the_removal_of_its_friendship(runtime: Runtime) -> None:
    """The friendship is checked under a lock in the route's own transaction: a removal
    racing the route either refuses it or deletes it too, never leaves it behind (it
    would deliver again on a later befriending, which removal promises it will not)."""
    owner = await _owner(runtime)
    await identity.add_human(runtime, "bob")
    bob = await identity.vend_endpoint(runtime, owner="bob", name="b", queues=["inbox"])
    hook = (await webhooks.create_webhook(runtime, owner, "github", "inbox"))["webhook_id"]
    for _ in range(25):
        await identity.add_friend(runtime, "alice", "bob")
        added, removed = await asyncio.gather(
            webhooks.add_route(runtime, owner, hook, bob["endpoint_id"]),
            identity.remove_friend(runtime, "alice", "bob"),
            return_exceptions=True,
        )
        assert not isinstance(removed, BaseException), removed
        assert added is None or isinstance(added, (dict, Forbidden)), added
        routes = await runtime.store.list_routes(hook)
        assert routes == [], "a route outlived its friendship's removal"
