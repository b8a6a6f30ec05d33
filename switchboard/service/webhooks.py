"""Webhooks and routes: create, list, rotate, delete, route add/remove (CLI and MCP)."""

from __future__ import annotations

import json
from typing import Any

from jsonschema import Draft202012Validator
from psycopg.types.json import Jsonb

from ..contract.schemaerrors import first_schema_problem
from ..errors import CeilingExceeded, Forbidden, InvalidArgument, NotFound
from ..routing.model import Grant, RoutingConfig
from ..routing.reach import unreachable
from ..routing.route import config_of, grant_for
from ..runtime import Runtime
from ..secrets_box import hash_token, mint_token
from ..sources import TRUST_SIGNED
from ..store import Row
from ..store.db import is_uuid
from .common import check_queue, check_storable, clip, jsonable
from .identity import named_human

SECRET_PREFIX = "whsec_"

#: How a refusal by an endpoint's ceiling says what to change: its scope is fixed when it
#: is vended (by the operator), so the fix is always a vend flag.
VEND_HINT = "an endpoint's scope is set when it is vended: `switchboard endpoint vend"


def _listed(values: list[str]) -> str:
    return f"it has {', '.join(values)}" if values else "it has none"


def ingest_url(rt: Runtime, token: str) -> str:
    return f"{rt.config.base_url}/webhooks/w/{token}"


#: An imported (producer-generated) signing secret: any printable text, inner spaces too
#: (GitHub's and Gitea's settings take any; GitHub's own example is "It's a Secret to
#: Everybody"), without control characters; whitespace at either end is a file's newline,
#: not the secret, and is cut.
MIN_SECRET_BYTES = 8
MAX_SECRET_BYTES = 1024
#: The largest ``source_config`` a webhook stores (serialized JSON).
MAX_SOURCE_CONFIG_BYTES = 8192


def check_secret(secret: Any) -> str:
    """A producer's secret as given, or InvalidArgument naming the field and the limit."""
    if not isinstance(secret, str):
        raise InvalidArgument("signing_secret: must be a string")
    secret = secret.strip()
    size = len(secret.encode("utf-8"))
    if not MIN_SECRET_BYTES <= size <= MAX_SECRET_BYTES:
        raise InvalidArgument(
            f"signing_secret: must be {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} bytes (got {size})"
        )
    if not secret.isprintable():
        raise InvalidArgument(
            "signing_secret: printable text only (spaces inside are kept), no control characters"
        )
    return secret


def _credentials(
    rt: Runtime, trust_mode: str, imported: Any = None
) -> tuple[str, str | None, bytes | None]:
    """A new ingest token and, for a signed source, a secret: minted, or the producer's own.

    The secret is returned only when it was minted here (an imported one is never shown
    back: its producer already has it).
    """
    token = mint_token(nbytes=24)
    if trust_mode != TRUST_SIGNED:
        if imported is not None:
            raise InvalidArgument(
                "signing_secret: this source is not signed (trust mode "
                f"{trust_mode!r}); it takes no secret"
            )
        return token, None, None
    if imported is not None:
        return token, None, rt.secrets.seal(check_secret(imported))
    secret = mint_token(SECRET_PREFIX, nbytes=32)
    return token, secret, rt.secrets.seal(secret)


def _source_config(source: Any, source_type: str, config: Any) -> dict[str, Any] | None:
    """``config`` checked against what the source declares (None: it takes none)."""
    schema = getattr(source, "config_schema", None)
    if schema is None:
        if config is not None:
            raise InvalidArgument(
                f"source_config: the {clip(repr(source_type))} source takes no configuration"
            )
        return None
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise InvalidArgument("source_config: must be a JSON object")
    check_storable(config, "source_config")
    size = len(json.dumps(config).encode())
    if size > MAX_SOURCE_CONFIG_BYTES:
        raise InvalidArgument(f"source_config: over {MAX_SOURCE_CONFIG_BYTES} bytes (got {size})")
    problem = first_schema_problem(Draft202012Validator(schema).iter_errors(config))
    if problem is not None:
        raise InvalidArgument(f"source_config: {problem.where()}: {problem.problem}")
    check = getattr(source, "check_config", None)
    if check is not None:
        try:
            check(config)
        except ValueError as exc:
            message = str(exc)
            if not message.startswith("source_config"):
                message = f"source_config: {message}"
            raise InvalidArgument(message) from exc
    return config


async def create_webhook(
    rt: Runtime,
    endpoint: Row,
    source_type: str,
    target_queue: str,
    *,
    signing_secret: Any = None,
    source_config: Any = None,
) -> dict[str, Any]:
    """Create a webhook owned by ``endpoint``, within its ceiling; the secret is shown once.

    ``signing_secret`` imports a secret the producer generated (stored sealed, never shown
    again); ``source_config`` configures a source that declares a ``config_schema``.
    """
    source = rt.registries.sources.get(source_type)
    if source is None:
        raise InvalidArgument(
            f"source_type: unknown source {clip(repr(source_type))} "
            f"(registered: {', '.join(rt.registries.sources.names())})"
        )
    if source_type not in endpoint["webhook_source_types"]:
        raise Forbidden(
            f"source_type: {source_type!r} is not among this endpoint's webhook source types"
            f" ({_listed(endpoint['webhook_source_types'])}); {VEND_HINT}"
            f" --source-types {source_type}`",
            code="forbidden_source_type",
        )
    check_queue(target_queue, "target_queue")
    if target_queue not in endpoint["webhook_queues"]:
        raise CeilingExceeded(
            f"target_queue: {target_queue!r} is not among this endpoint's webhook queues"
            f" ({_listed(endpoint['webhook_queues'])}); {VEND_HINT}"
            f" --webhook-queues {target_queue}`"
        )
    config = _source_config(source, source_type, source_config)
    token, secret, sealed = _credentials(rt, source.trust_mode, signing_secret)
    row = await rt.store.create_webhook_within(
        endpoint["id"],
        int(endpoint["webhook_max"]),
        source_type=source_type,
        target_queue=target_queue,
        trust_mode=source.trust_mode,
        ingest_token_hash=hash_token(token),
        signing_secret_enc=sealed,
        source_config=Jsonb(config) if config is not None else None,
    )
    if row is None:
        raise CeilingExceeded(
            f"webhook_max: this endpoint already owns its maximum of {endpoint['webhook_max']}"
            f" webhooks; delete one, or {VEND_HINT} --webhook-max N` (N above"
            f" {endpoint['webhook_max']})"
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
    elif signing_secret is not None:
        out["signing_secret_imported"] = True
    if config is not None:
        out["source_config"] = config
    return out


async def owned_webhook(
    rt: Runtime, caller: Row | None, webhook_id: str, *, deleted: bool = False
) -> Row:
    """The webhook, if ``caller``'s human owns it; another human's is exactly not found.

    With ``deleted``, a webhook that was deleted is found too (its tombstone, with
    ``deleted_at``): what reads its stored events asks for that, nothing that changes it.
    """
    row = await rt.store.get_webhook(webhook_id)
    if row is None and deleted:
        row = await rt.store.get_deleted_webhook(webhook_id)
    if row is None or (caller is not None and row["owner_human"] != caller["owner_human"]):
        raise NotFound(f"webhook {clip(webhook_id)} not found")
    return row


def webhook_view(rt: Runtime, row: Row) -> dict[str, Any]:
    """A webhook as listed: never its signing secret nor its ingest URL (shown once)."""
    return dict(
        jsonable(
            {
                "webhook_id": row["id"],
                "endpoint_id": row["endpoint_id"],
                "source_type": row["source_type"],
                "target_queue": row["target_queue"],
                "trust_mode": row["trust_mode"],
                "rule_count": len((row.get("routing") or {}).get("rules") or []),
                "created_at": row["created_at"],
                "rotated_at": row["rotated_at"],
                "source_config": row.get("source_config"),
                # until when the credentials the last rotation replaced still work (None: they don't)
                "previous_until": row.get("previous_until"),
            }
        )
    )


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


async def list_all_webhooks(rt: Runtime, *, owner: str | None = None) -> dict[str, Any]:
    """Every webhook, or those of the human ``owner`` names (a name or an id), for an operator.

    Each is :func:`webhook_view` plus its endpoint's name and its owner (id and name); an
    unknown ``owner`` is not found.
    """
    human = await named_human(rt, owner, "owner") if owner is not None else None
    rows = await rt.store.list_webhooks(human["id"] if human else None)
    return {
        "webhooks": [
            {
                **webhook_view(rt, r),
                "endpoint_name": r["endpoint_name"],
                "owner_human": r["owner_human"],
                "owner_name": r["owner_name"],
            }
            for r in rows
        ]
    }


async def rotate_webhook(
    rt: Runtime, caller: Row | None, webhook_id: str, *, signing_secret: Any = None
) -> dict[str, Any]:
    """New ingest URL and secret (minted, or ``signing_secret`` imported).

    The previous URL and secret keep working for ``[ingest] rotation_overlap_hours``
    (default 24), so deliveries the producer already signed or queued still land.
    """
    row = await owned_webhook(rt, caller, webhook_id)
    token, secret, sealed = _credentials(rt, row["trust_mode"], signing_secret)
    overlap = float(rt.config.section("ingest").get("rotation_overlap_hours", 24)) * 3600
    done = await rt.store.rotate_webhook(row["id"], hash_token(token), sealed, overlap)
    out: dict[str, Any] = {
        "webhook_id": row["id"],
        "ingest_url": ingest_url(rt, token),
        "previous_until": jsonable(done["previous_until"]),
    }
    if secret is not None:
        out["signing_secret"] = secret
    elif signing_secret is not None:
        out["signing_secret_imported"] = True
    return out


async def delete_webhook(rt: Runtime, caller: Row | None, webhook_id: str) -> dict[str, Any]:
    row = await owned_webhook(rt, caller, webhook_id)
    await rt.store.delete_webhook(row["id"])
    return {"webhook_id": row["id"], "deleted": True}


# One message whatever the reason (no oracle for other humans' endpoints), naming both fixes.
_ROUTE_REFUSED = (
    "the target endpoint cannot receive this webhook's deliveries: it must be a live endpoint"
    " of the webhook owner's human, or of a human the owner befriended (`switchboard friend"
    " add OWNER TARGET_OWNER`)"
)


async def reach_warnings(
    rt: Runtime, config: RoutingConfig, grant: Grant, endpoint_id: str | None = None
) -> list[dict[str, Any]]:
    """:func:`switchboard.routing.reach.unreachable` with the endpoints' names (only those
    about ``endpoint_id`` when given)."""
    found = [
        w
        for w in unreachable(config, grant)
        if endpoint_id is None or w["endpoint_id"] == endpoint_id
    ]
    if not found:
        return []
    names = {}
    for eid in dict.fromkeys(w["endpoint_id"] for w in found):
        names[eid] = (await rt.store.get_endpoint(eid))["name"]
    return [
        w
        for w in unreachable(config, grant, names)
        if endpoint_id is None or w["endpoint_id"] == endpoint_id
    ]


async def add_route(
    rt: Runtime, caller: Row | None, webhook_id: str, target_endpoint_id: str
) -> dict[str, Any]:
    """Route to another endpoint of the same human or of an approved friend (idempotent).

    ``warnings`` lists the routes of the webhook's config that would now put todos in a
    queue the new target does not drain (``unreachable_queue``): allowed, but seen by no one.
    """
    row = await owned_webhook(rt, caller, webhook_id)
    try:
        target = await rt.store.get_endpoint(target_endpoint_id)
    except NotFound:
        raise Forbidden(_ROUTE_REFUSED) from None
    if target["state"] != "active":
        raise Forbidden(_ROUTE_REFUSED)
    route = await rt.store.add_route(
        row["id"],
        target["id"],
        caller["id"] if caller else None,
        owner_human=row["owner_human"],
        target_human=target["owner_human"],
    )
    if route is None:
        raise Forbidden(_ROUTE_REFUSED)
    resolved = await rt.store.resolve_webhook_by_id(row["id"])
    warnings = (
        []
        if resolved is None
        else await reach_warnings(rt, config_of(resolved), grant_for(resolved), str(target["id"]))
    )
    return {**jsonable(route), "warnings": warnings}


async def remove_route(
    rt: Runtime, caller: Row | None, webhook_id: str, target_endpoint_id: str
) -> dict[str, Any]:
    row = await owned_webhook(rt, caller, webhook_id)
    if not is_uuid(target_endpoint_id):
        # no endpoint has such an id: said so, rather than "removed: false" echoing it
        raise InvalidArgument(
            f"target_endpoint_id: not an endpoint id (a UUID) (got {clip(repr(target_endpoint_id))})"
        )
    removed = await rt.store.remove_route(row["id"], target_endpoint_id)
    return {"webhook_id": row["id"], "target_endpoint_id": target_endpoint_id, "removed": removed}


async def list_routes(rt: Runtime, caller: Row | None, webhook_id: str) -> dict[str, Any]:
    row = await owned_webhook(rt, caller, webhook_id)
    routes = await rt.store.list_routes(row["id"])
    return {"webhook_id": row["id"], "routes": jsonable(routes)}
