"""Humans, friendships and endpoints: the operator's identity verbs."""

from __future__ import annotations

import datetime as dt
from typing import Any

from ..errors import Forbidden, InvalidArgument, NotFound
from ..runtime import Runtime
from ..secrets_box import hash_token, mint_token
from ..store import Row
from .common import check_name, check_queues, clip, jsonable

TOKEN_PREFIX = "sbe_"
#: The longest an endpoint may be vended for: a hundred years (``--expires-in``); past
#: it the expiry date is out of range (a traceback, before this bound).
EXPIRES_MAX_S = 36500 * 86400


async def named_human(rt: Runtime, name_or_id: Any, field: str) -> Row:
    """The human a caller names (by name or id), the name checked first: one that could
    not be stored names no one, and psycopg cannot even send it."""
    return await rt.store.get_human(check_name(name_or_id, field))


async def add_human(rt: Runtime, name: str) -> dict[str, Any]:
    row = await rt.store.create_human(check_name(name, "name"))
    return {"human_id": row["id"], "name": row["name"]}


async def add_friend(
    rt: Runtime, from_name: str, to_name: str, state: str = "approved"
) -> dict[str, Any]:
    """Record a directed friendship: ``from`` lets its webhooks route to ``to``'s endpoints."""
    if state not in ("pending", "approved", "revoked"):
        raise InvalidArgument("state: must be pending, approved or revoked")
    a = await named_human(rt, from_name, "from")
    b = await named_human(rt, to_name, "to")
    if a["id"] == b["id"]:
        raise InvalidArgument("to: a human cannot befriend itself")
    row = await rt.store.set_friendship(a["id"], b["id"], state)
    return {"from": a["name"], "to": b["name"], "state": row["state"]}


async def list_humans(rt: Runtime) -> dict[str, Any]:
    """Every human, oldest first, with how many endpoints it owns (and how many are live)."""
    rows = await rt.store.list_humans()
    return {
        "humans": [
            jsonable(
                {
                    "human_id": r["id"],
                    "name": r["name"],
                    "endpoints": r["endpoints"],
                    "live_endpoints": r["live_endpoints"],
                    "created_at": r["created_at"],
                }
            )
            for r in rows
        ]
    }


async def list_friends(rt: Runtime, human: str | None = None) -> dict[str, Any]:
    """Every friendship, or those ``human`` (a name or id) is on either side of; unknown is
    not found. ``from``'s webhooks may route to ``to``'s endpoints while ``approved``."""
    found = await named_human(rt, human, "human") if human is not None else None
    rows = await rt.store.list_friendships(found["id"] if found else None)
    return {
        "friendships": [
            jsonable(
                {
                    "from": r["from_name"],
                    "to": r["to_name"],
                    "state": r["state"],
                    "created_at": r["created_at"],
                    "updated_at": r["updated_at"],
                }
            )
            for r in rows
        ]
    }


async def remove_friend(rt: Runtime, from_name: str, to_name: str) -> dict[str, Any]:
    """Delete the friendship ``from`` → ``to`` and the routes it authorized.

    Routing re-checks friendships on every delivery, so ``from``'s webhooks stop reaching
    ``to``'s endpoints at once either way; deleting the routes too makes the removal final:
    befriending again later does not silently resume those deliveries (``friend add
    --state revoked`` is the pause that keeps them). A rule naming one of those endpoints
    then takes the default (``rule_not_granted``), and its next save is refused.
    """
    a = await named_human(rt, from_name, "from")
    b = await named_human(rt, to_name, "to")
    routes = await rt.store.remove_friendship(a["id"], b["id"])
    if routes is None:
        raise NotFound(
            f"no friendship from {a['name']!r} to {b['name']!r} (see `switchboard friend list`)"
        )
    return {
        "from": a["name"],
        "to": b["name"],
        "removed": True,
        "routes_removed": [
            jsonable(
                {
                    "webhook_id": r["webhook_id"],
                    "target_endpoint_id": r["target_endpoint_id"],
                    "target_name": r["target_name"],
                }
            )
            for r in routes
        ],
    }


def known_verbs(rt: Runtime) -> list[str]:
    return sorted({tool.verb for tool in rt.registries.mcp_tools})


def default_verbs(rt: Runtime, *, may_own_webhooks: bool) -> list[str]:
    """The verbs an endpoint gets when ``--verbs`` is not given: every one, except that an
    endpoint which may own no webhooks (a pool that drains queues and reads prompt-
    injectable todo text) gets none of the verbs that change its human's webhooks."""
    if may_own_webhooks:
        return known_verbs(rt)
    managing = {t.verb for t in rt.registries.mcp_tools if t.manages_webhooks}
    return [v for v in known_verbs(rt) if v not in managing]


async def vend_endpoint(
    rt: Runtime,
    *,
    owner: str,
    name: str,
    queues: list[str] | None = None,
    webhook_queues: list[str] | None = None,
    source_types: list[str] | None = None,
    webhook_max: int = 0,
    verbs: list[str] | None = None,
    expires_in_seconds: int | None = None,
) -> dict[str, Any]:
    """Create an endpoint; the token is returned here once and stored only as a hash."""
    human = await named_human(rt, owner, "owner")
    name = check_name(name, "name")
    sources = list(dict.fromkeys(source_types or []))
    unknown = [s for s in sources if s not in rt.registries.sources]
    if unknown:
        raise InvalidArgument(
            f"source_types: unknown source {unknown[0]!r} "
            f"(registered: {', '.join(rt.registries.sources.names())})"
        )
    if not isinstance(webhook_max, int) or not 0 <= webhook_max <= 1000:
        raise InvalidArgument("webhook_max: must be an integer from 0 to 1000")
    all_verbs = known_verbs(rt)
    chosen = (
        list(dict.fromkeys(verbs))
        if verbs is not None
        else default_verbs(rt, may_own_webhooks=webhook_max > 0 and bool(webhook_queues))
    )
    bad = [v for v in chosen if v not in all_verbs]
    if bad:
        raise InvalidArgument(f"verbs: unknown verb {bad[0]!r}")
    expires_at = None
    if expires_in_seconds is not None:
        if not 0 < expires_in_seconds <= EXPIRES_MAX_S:
            raise InvalidArgument(
                f"expires_in: a number of seconds from 1 to {EXPIRES_MAX_S} (100 years)"
                f" (got {clip(expires_in_seconds)})"
            )
        expires_at = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=expires_in_seconds)
    token = mint_token(TOKEN_PREFIX)
    row = await rt.store.create_endpoint(
        owner_human=human["id"],
        name=name,
        token_hash=hash_token(token),
        scope_queues=check_queues(queues or [], "queues"),
        verbs=chosen,
        webhook_queues=check_queues(webhook_queues or [], "webhook_queues"),
        webhook_source_types=sources,
        webhook_max=webhook_max,
        expires_at=expires_at,
    )
    return {"endpoint_id": row["id"], "token": token, "mcp_url": rt.config.base_url + "/mcp"}


def endpoint_view(row: dict[str, Any]) -> dict[str, Any]:
    """An endpoint as shown to operators and agents: never the token or its hash."""
    keys = (
        "id",
        "name",
        "owner_name",
        "scope_queues",
        "verbs",
        "webhook_queues",
        "webhook_source_types",
        "webhook_max",
        "state",
        "expires_at",
        "created_at",
        "revoked_at",
    )
    view = {k: row.get(k) for k in keys if k in row}
    view["endpoint_id"] = view.pop("id")
    return dict(jsonable(view))


async def list_endpoints(rt: Runtime) -> list[dict[str, Any]]:
    return [endpoint_view(r) for r in await rt.store.list_endpoints()]


async def show_endpoint(rt: Runtime, endpoint_id: str) -> dict[str, Any]:
    """One endpoint as operators see it, with its effective verbs and, of the installed
    ones, those it lacks (``verbs_withheld``: what ``--verbs`` would have to name)."""
    view = endpoint_view(await rt.store.get_endpoint(endpoint_id))
    have = set(view.get("verbs") or ())
    view["verbs_withheld"] = [v for v in known_verbs(rt) if v not in have]
    return view


async def revoke_endpoint(rt: Runtime, endpoint_id: str) -> dict[str, Any]:
    row = await rt.store.revoke_endpoint(endpoint_id)
    return {"endpoint_id": row["id"], "state": row["state"]}


async def authenticate(rt: Runtime, token: str | None) -> dict[str, Any]:
    """The live endpoint for a bearer token; revoked, expired or unknown are all refused."""
    if not token:
        raise Forbidden("missing bearer token")
    row = await rt.store.endpoint_by_token_hash(hash_token(token))
    if row is None:
        raise Forbidden("invalid, revoked or expired token")
    return row
