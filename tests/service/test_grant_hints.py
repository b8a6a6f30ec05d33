"""A refusal by a grant or a scope names what to change: the vend flag, the route, the friend."""

from __future__ import annotations

import pytest

from switchboard.errors import CeilingExceeded, Forbidden, RuleValidationError
from switchboard.runtime import Runtime
from switchboard.service import identity, rules, todos, webhooks


async def test_each_refusal_names_its_fix(runtime: Runtime) -> None:
    rt = runtime
    await identity.add_human(rt, "alice")
    await identity.add_human(rt, "bob")
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
    bobs = await identity.vend_endpoint(rt, owner="bob", name="bobs", queues=["inbox"])

    with pytest.raises(Forbidden) as refused:
        await webhooks.create_webhook(rt, router, "github", "inbox")
    assert refused.value.code == "forbidden_source_type"
    assert "(it has generic)" in str(refused.value)
    assert "`switchboard endpoint vend --source-types github`" in str(refused.value)

    with pytest.raises(CeilingExceeded) as ceiling:
        await webhooks.create_webhook(rt, router, "generic", "alerts")
    assert "(it has inbox)" in str(ceiling.value)
    assert "`switchboard endpoint vend --webhook-queues alerts`" in str(ceiling.value)

    hook = await webhooks.create_webhook(rt, router, "generic", "inbox")
    with pytest.raises(CeilingExceeded) as full:
        await webhooks.create_webhook(rt, router, "generic", "inbox")
    assert "maximum of 1 webhooks; delete one, or" in str(full.value)
    assert "--webhook-max N` (N above 1)" in str(full.value)

    with pytest.raises(Forbidden) as scope:
        await todos.list_todos(rt, router, queue="handoff")
    assert "(inbox)" in str(scope.value) and "`switchboard endpoint vend --queues" in str(
        scope.value
    )

    # bob is no friend of alice's: one uniform refusal, naming the friendship it needs.
    with pytest.raises(Forbidden) as route:
        await webhooks.add_route(rt, router, hook["webhook_id"], bobs["endpoint_id"])
    assert "`switchboard friend add OWNER TARGET_OWNER`" in str(route.value)
    with pytest.raises(Forbidden) as missing:
        await webhooks.add_route(
            rt, router, hook["webhook_id"], "00000000-0000-0000-0000-000000000000"
        )
    assert str(missing.value) == str(route.value)

    with pytest.raises(RuleValidationError) as queue:
        await rules.set_rules(
            rt,
            router,
            hook["webhook_id"],
            [{"id": "r", "expr": "true", "action": {"queue": "handoff"}}],
        )
    assert queue.value.code == "not_granted"
    text = str(queue.value)
    assert "queue 'handoff' is not granted to this webhook (inbox)" in text
    assert "--webhook-queues" in text and "--queues" in text

    with pytest.raises(RuleValidationError) as target:
        await rules.set_rules(
            rt,
            router,
            hook["webhook_id"],
            [
                {
                    "id": "r",
                    "expr": "true",
                    "action": {"queue": "inbox", "endpoints": [bobs["endpoint_id"]]},
                }
            ],
        )
    assert "`switchboard webhook route add`" in str(target.value)
    assert "add_webhook_route" in str(target.value)
