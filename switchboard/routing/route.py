"""Run the enabled routing stages in order; the first decision wins, else the default."""

from __future__ import annotations

from typing import Any

from .decide import default_decision
from .model import Decision, Fault, Grant, RoutingContext, RoutingStage, Target


def grant_for(webhook: dict[str, Any]) -> Grant:
    """The grant of a resolved webhook row (see ``store.webhooks.resolve_webhook``)."""
    target_queue = webhook["target_queue"]
    queues = dict.fromkeys(
        [target_queue, *(webhook.get("owner_webhook_queues") or []),
         *(webhook.get("human_queues") or [])]
    )
    targets = tuple(
        Target(t["id"], tuple(t.get("queues") or ())) for t in webhook.get("targets") or []
    )
    return Grant(target_queue=target_queue, queues=tuple(queues), targets=targets)


async def route(
    stages: list[RoutingStage], webhook: dict[str, Any], envelope: dict[str, Any], grant: Grant
) -> Decision:
    ctx = RoutingContext(webhook=webhook, envelope=envelope, grant=grant)
    faults: list[Fault] = []
    for stage in stages:
        result = await stage.route(ctx)
        faults.extend(result.faults)
        if result.decision is not None:
            return result.decision
    return default_decision(grant, webhook.get("default_action"), faults)
