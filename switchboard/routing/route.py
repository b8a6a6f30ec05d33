"""Run the enabled routing stages in order; the first decision wins, else the default."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .decide import default_decision
from .model import Decision, Fault, Grant, RoutingConfig, RoutingContext, RoutingStage, Target


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


def config_of(webhook: dict[str, Any]) -> RoutingConfig:
    """The routing config stored on a webhook row (its ``routing`` column)."""
    return RoutingConfig.from_json(webhook.get("routing"))


async def route(
    stages: Sequence[RoutingStage],
    webhook: dict[str, Any],
    config: RoutingConfig,
    envelope: dict[str, Any],
    grant: Grant,
) -> Decision:
    """The decision for one delivery: live (the saved config) or a dry run (any config)."""
    ctx = RoutingContext(webhook=webhook, envelope=envelope, grant=grant, config=config)
    faults: list[Fault] = []
    for stage in stages:
        result = await stage.route(ctx)
        faults.extend(result.faults)
        if result.decision is not None:
            return result.decision
    return default_decision(grant, config.default_action, faults)
