"""Todos no one can claim: a warning when such a route or rule is saved, and the owner's view.

The README's walkthrough, as a new user first runs it: pool-m drains only ``handoff`` and is
routed a webhook whose target queue is ``inbox``.
"""

from __future__ import annotations

from typing import Any

import pytest
from sbtest import CLI

from switchboard.errors import NotFound
from switchboard.routing.model import Grant, RoutingConfig, Target
from switchboard.routing.reach import UNREACHABLE, unreachable
from switchboard.runtime import Runtime
from switchboard.service import identity, rules, todos, webhooks
from switchboard.service.ingest import ingest
from switchboard.sources import Headers

GRANT = Grant(
    target_queue="inbox",
    queues=("inbox", "handoff"),
    targets=(Target("router", ("inbox",)), Target("pool", ("handoff",))),
)


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        # no rules: the target queue on every target; pool does not drain inbox
        ({}, [("default", "pool", "inbox")]),
        ({"default_action": {"drop": True}}, []),
        ({"default_action": {"queue": "inbox", "endpoints": ["router"]}}, []),
        (
            {
                "rules": [{"id": "h", "expr": "true", "action": {"queue": "handoff"}}],
                "default_action": {"drop": True},
            },
            [("h", "router", "handoff")],
        ),
        (
            {
                "rules": [
                    {
                        "id": "h",
                        "expr": "true",
                        "action": {"queue": "handoff", "endpoints": ["pool"]},
                    }
                ],
                "default_action": {"drop": True},
            },
            [],
        ),
        (
            {"rules": [{"id": "d", "expr": "true", "action": {"drop": True}}]},
            [("default", "pool", "inbox")],
        ),
    ],
)
def test_which_routes_reach_no_one(
    config: dict[str, Any], expected: list[tuple[str, str, str]]
) -> None:
    found = unreachable(RoutingConfig.from_json(config), GRANT, {"pool": "pool-m"})
    assert [
        ("default" if w.get("default") else w["rule_id"], w["endpoint_id"], w["queue"])
        for w in found
    ] == expected
    for w in found:
        assert w["code"] == UNREACHABLE and f"{w['queue']!r}" in w["message"]
    if found and found[0]["endpoint_id"] == "pool":
        assert "endpoint pool-m (pool)" in found[0]["message"]


async def test_warned_at_save_and_shown_to_the_owner(cli: CLI, runtime: Runtime) -> None:
    rt = runtime
    await identity.add_human(rt, "alice")
    made = await identity.vend_endpoint(
        rt,
        owner="alice",
        name="router",
        queues=["inbox"],
        webhook_queues=["inbox"],
        source_types=["generic"],
        webhook_max=1,
    )
    router = await identity.authenticate(rt, made["token"])
    pool_made = await identity.vend_endpoint(rt, owner="alice", name="pool-m", queues=["handoff"])
    pool = await identity.authenticate(rt, pool_made["token"])
    hook = await webhooks.create_webhook(rt, router, "generic", "inbox")
    wid = hook["webhook_id"]

    route = await webhooks.add_route(rt, router, wid, pool["id"])
    [warning] = route["warnings"]
    assert warning["endpoint_id"] == str(pool["id"]) and warning["queue"] == "inbox"
    assert warning["default"] is True and "endpoint pool-m" in warning["message"]

    reply = await ingest(
        rt,
        hook["ingest_url"].rsplit("/", 1)[1],
        Headers({"Content-Type": "application/json", "X-Delivery-Id": "d1"}),
        b'{"n": 1}',
        "application/json",
    )
    assert reply.status == 202
    # pool-m cannot see its inbox todo; the webhook's owner can.
    assert (await todos.list_todos(rt, pool))["todos"] == []
    [stranded] = (await todos.list_todos(rt, router, unreachable=True))["todos"]
    assert stranded["endpoint_id"] == str(pool["id"]) and stranded["queue"] == "inbox"
    assert stranded["endpoint_name"] == "pool-m" and stranded["webhook_id"] == wid
    assert stranded["unreachable"] is True and stranded["id"] == stranded["todo_id"]
    assert (await todos.list_todos(rt, pool, unreachable=True))["todos"] == [stranded]
    assert (await todos.list_todos(rt, router, unreachable=True, queue="handoff"))["todos"] == []
    # An operator sees it too (and only it: the router's inbox todo is reachable).
    listed = cli.json("todos", "list", "--unreachable")["todos"]
    assert [t["id"] for t in listed] == [stranded["id"]]
    with pytest.raises(NotFound):
        await todos.list_all_todos(
            rt, endpoint_id="00000000-0000-0000-0000-000000000000", unreachable=True
        )

    # A rule routing handoff to every target reaches the router, which does not drain it.
    saved = await rules.set_rules(
        rt,
        router,
        wid,
        [{"id": "h", "expr": "true", "action": {"queue": "handoff"}}],
        {"drop": True},
    )
    [warning] = saved["warnings"]
    assert (warning["rule_id"], warning["endpoint_id"], warning["queue"]) == (
        "h",
        str(router["id"]),
        "handoff",
    )
    assert (await rules.list_rules(rt, router, wid))["warnings"] == saved["warnings"]
    # Narrowed to the pool, with everything else dropped: nothing to warn about.
    saved = await rules.set_rules(
        rt,
        router,
        wid,
        [{"id": "h", "expr": "true", "action": {"queue": "handoff", "endpoints": [pool["id"]]}}],
        {"drop": True},
    )
    assert saved["warnings"] == []
