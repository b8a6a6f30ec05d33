"""Webhooks and routes: create, list, rotate, delete, route add/remove (CLI and MCP)."""

from __future__ import annotations

from typing import Any

from ..errors import CeilingExceeded, Forbidden, InvalidArgument, NotFound
from ..runtime import Runtime
from ..secrets_box import hash_token, mint_token
from ..sources import TRUST_SIGNED
from ..store import Row
from .common import check_queue, jsonable

SECRET_PREFIX = "whsec_"


def ingest_url(rt: Runtime, token: str) -> str:
    return f"{rt.config.base_url}/webhooks/w/{token}"


def _mint_credentials(rt: Runtime, trust_mode: str) -> tuple[str, str | None, bytes | None]:
    token = mint_token(nbytes=24)
    if trust_mode != TRUST_SIGNED:
        return token, None, None
    secret = mint_token(SECRET_PREFIX, nbytes=32)
    return token, secret, rt.secrets.seal(secret)


async def create_webhook(
    rt: Runtime, endpoint: Row, source_type: str, target_queue: str
) -> dict[str, Any]:
    """Create a webhook owned by ``endpoint``, within its ceiling; the secret is shown once."""
    source = rt.registries.sources.get(source_type)
    if source is None:
        raise InvalidArgument(
            f"source_type: unknown source {source_type!r} "
            f"(registered: {', '.join(rt.registries.sources.names())})"
        )
    if source_type not in endpoint["webhook_source_types"]:
        raise Forbidden(
            f"source_type: {source_type!r} is not among this endpoint's webhook source types",
            code="forbidden_source_type",
        )
    check_queue(target_queue, "target_queue")
    if target_queue not in endpoint["webhook_queues"]:
        raise CeilingExceeded(
            f"target_queue: {target_queue!r} is not among this endpoint's webhook queues"
        )
    token, secret, sealed = _mint_credentials(rt, source.trust_mode)
    row = await rt.store.create_webhook_within(
        endpoint["id"],
        int(endpoint["webhook_max"]),
        source_type=source_type,
        target_queue=target_queue,
        trust_mode=source.trust_mode,
        ingest_token_hash=hash_token(token),
        signing_secret_enc=sealed,
    )
    if row is None:
        raise CeilingExceeded(
            f"webhook_max: this endpoint already owns its maximum of {endpoint['webhook_max']}"
            " webhooks"
        )
    out: dict[str, Any] = {
        "webhook_id": row["id"],
        "ingest_url": ingest_url(rt, token),
        "source_type": source_type,
        "target_queue": target_queue,
        "trust_mode": source.trust_mode,
    }
    if secret is not None:
        out["signing_secret"] = secret
    return out


async def owned_webhook(rt: Runtime, caller: Row | None, webhook_id: str) -> Row:
    """The webhook, if ``caller``'s human owns it; another human's is exactly not found."""
    row = await rt.store.get_webhook(webhook_id)
    if row is None or (caller is not None and row["owner_human"] != caller["owner_human"]):
        raise NotFound(f"webhook {webhook_id} not found")
    return row


def webhook_view(rt: Runtime, row: Row) -> dict[str, Any]:
    """A webhook as listed: never its signing secret nor its ingest URL (shown once)."""
    return dict(jsonable({
        "webhook_id": row["id"],
        "endpoint_id": row["endpoint_id"],
        "source_type": row["source_type"],
        "target_queue": row["target_queue"],
        "trust_mode": row["trust_mode"],
        "rule_count": len((row.get("routing") or {}).get("rules") or []),
        "created_at": row["created_at"],
        "rotated_at": row["rotated_at"],
    }))


async def list_webhooks(rt: Runtime, caller: Row) -> dict[str, Any]:
    rows = await rt.store.list_webhooks_of_human(caller["owner_human"])
    used = sum(1 for r in rows if r["endpoint_id"] == caller["id"])
    return {
        "webhooks": [webhook_view(rt, r) for r in rows],
        "ceiling": {
            "webhook_max": caller["webhook_max"],
            "webhook_queues": list(caller["webhook_queues"]),
            "webhook_source_types": list(caller["webhook_source_types"]),
        },
        "usage": {"webhooks": used, "remaining": max(0, caller["webhook_max"] - used)},
    }


async def rotate_webhook(rt: Runtime, caller: Row | None, webhook_id: str) -> dict[str, Any]:
    row = await owned_webhook(rt, caller, webhook_id)
    token, secret, sealed = _mint_credentials(rt, row["trust_mode"])
    await rt.store.rotate_webhook(row["id"], hash_token(token), sealed)
    out: dict[str, Any] = {"webhook_id": row["id"], "ingest_url": ingest_url(rt, token)}
    if secret is not None:
        out["signing_secret"] = secret
    return out


async def delete_webhook(rt: Runtime, caller: Row | None, webhook_id: str) -> dict[str, Any]:
    row = await owned_webhook(rt, caller, webhook_id)
    await rt.store.delete_webhook(row["id"])
    return {"webhook_id": row["id"], "deleted": True}


_ROUTE_REFUSED = "the target endpoint cannot receive this webhook's deliveries"


async def add_route(
    rt: Runtime, caller: Row | None, webhook_id: str, target_endpoint_id: str
) -> dict[str, Any]:
    """Route to another endpoint of the same human or of an approved friend (idempotent)."""
    row = await owned_webhook(rt, caller, webhook_id)
    try:
        target = await rt.store.get_endpoint(target_endpoint_id)
    except NotFound:
        raise Forbidden(_ROUTE_REFUSED) from None
    if target["state"] != "active" or not await rt.store.may_route(
        row["owner_human"], target["owner_human"]
    ):
        raise Forbidden(_ROUTE_REFUSED)
    route = await rt.store.add_route(row["id"], target["id"], caller["id"] if caller else None)
    return dict(jsonable(route))


async def remove_route(
    rt: Runtime, caller: Row | None, webhook_id: str, target_endpoint_id: str
) -> dict[str, Any]:
    row = await owned_webhook(rt, caller, webhook_id)
    removed = await rt.store.remove_route(row["id"], target_endpoint_id)
    return {"webhook_id": row["id"], "target_endpoint_id": target_endpoint_id, "removed": removed}


async def list_routes(rt: Runtime, caller: Row | None, webhook_id: str) -> dict[str, Any]:
    row = await owned_webhook(rt, caller, webhook_id)
    routes = await rt.store.list_routes(row["id"])
    return {"webhook_id": row["id"], "routes": jsonable(routes)}
