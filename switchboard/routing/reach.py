"""Which of a routing config's routes would put todos where no one can claim them (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .decide import default_decision, resolve
from .model import Grant, RoutingConfig

#: The code of the warning a save or a route answers with (never a refusal: the grant allows
#: it, and the endpoint's scope may be widened by vending again).
UNREACHABLE = "unreachable_queue"


def unreachable(
    config: RoutingConfig, grant: Grant, names: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """A warning per route of ``config`` whose queue a target endpoint does not drain.

    Each rule's queue action and the default (``default_action``, else the target queue on
    every target, exactly as a delivery would take it) is resolved under ``grant``; a target
    whose scope lacks the queue would get todos no one can see or claim. ``names`` maps
    endpoint ids to names for the message.
    """
    names = names or {}
    scopes = {t.endpoint_id: t.scope_queues for t in grant.targets}
    routes: list[tuple[dict[str, Any], str, tuple[str, ...]]] = []
    for index, rule in enumerate(config.rules):
        reached = resolve(rule["action"], grant) if "queue" in rule["action"] else None
        if reached is not None:
            where = {"rule_index": index, "rule_id": rule.get("id")}
            if rule.get("name"):
                where["rule_name"] = rule["name"]
            routes.append((where, *reached))
    default = default_decision(grant, config.default_action)
    if not default.drop and default.queue is not None:
        routes.append(({"default": True}, default.queue, default.endpoints))
    out: list[dict[str, Any]] = []
    for where, queue, endpoints in routes:
        for endpoint in endpoints:
            if queue in scopes.get(endpoint, ()):
                continue
            label = (
                f"rule {where['rule_index']} (id {where['rule_id']})"
                if "rule_index" in where
                else "the default route"
            )
            name = names.get(endpoint)
            who = f"endpoint {name} ({endpoint})" if name else f"endpoint {endpoint}"
            drains = ", ".join(scopes.get(endpoint, ())) or "none"
            out.append(
                {
                    "code": UNREACHABLE,
                    **where,
                    "endpoint_id": endpoint,
                    "queue": queue,
                    "message": f"{label} sends {who} todos in queue {queue!r}, which it does not"
                    f" drain (it drains: {drains}): no one can claim them. Narrow the"
                    " action's endpoints, route another queue, or vend an endpoint"
                    f" with `--queues {queue}`; list_todos with unreachable=true (CLI:"
                    " `todos list --unreachable`) shows those already made",
                }
            )
    return out
