"""MCP tools for webhooks and their routes, over switchboard.service.webhooks."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from switchboard.service import refusals, webhooks

from .context import ToolContext

WebhookId = Annotated[str, Field(description="The webhook's id (webhook_id)")]
EndpointId = Annotated[str, Field(description="The target endpoint's id")]


SigningSecret = Annotated[
    str | None,
    Field(
        description="The producer's own signing secret to import (e.g. Stripe's whsec_...; 8 to "
        "1024 bytes of printable text, inner spaces kept). Stored sealed and never shown back. Omit to have "
        "one minted (returned once)."
    ),
]


async def create_webhook(
    ctx: ToolContext,
    source_type: Annotated[
        str, Field(description="cairn, gitea, github, generic, hmac, stripe, ...")
    ],
    target_queue: Annotated[str, Field(description="One of this endpoint's webhook queues")],
    signing_secret: SigningSecret = None,
    source_config: Annotated[
        dict[str, Any] | None,
        Field(
            description="The source's configuration, for a source that takes one: the hmac "
            "source's signature scheme (signature_header, encoding, signed, "
            "timestamp, delivery_id, kind, ...)"
        ),
    ] = None,
) -> dict[str, Any]:
    """Create a webhook owned by this endpoint. Returns its ingest_url (which carries the
    ingest token) and, for signed sources, its signing_secret: both shown once, never again
    (an imported signing_secret is not shown back: signing_secret_imported is true)."""
    return await webhooks.create_webhook(
        ctx.runtime,
        ctx.endpoint,
        source_type,
        target_queue,
        signing_secret=signing_secret,
        source_config=source_config,
    )


async def list_webhooks(ctx: ToolContext) -> dict[str, Any]:
    """List the webhooks of this endpoint's human (never their secrets nor ingest URLs),
    with this endpoint's ceiling (webhook_max, queues, source types) and usage."""
    return await webhooks.list_webhooks(ctx.runtime, ctx.endpoint)


async def rotate_webhook(
    ctx: ToolContext, webhook_id: WebhookId, signing_secret: SigningSecret = None
) -> dict[str, Any]:
    """Mint a new ingest URL and signing secret (shown once; or import the producer's new
    secret). The previous URL and secret keep working until previous_until (the server's
    rotation overlap, 24 h by default), so deliveries already in flight still land."""
    return await webhooks.rotate_webhook(
        ctx.runtime, ctx.endpoint, webhook_id, signing_secret=signing_secret
    )


async def delete_webhook(ctx: ToolContext, webhook_id: WebhookId) -> dict[str, Any]:
    """Delete a webhook; its stored events stay."""
    return await webhooks.delete_webhook(ctx.runtime, ctx.endpoint, webhook_id)


async def add_webhook_route(
    ctx: ToolContext, webhook_id: WebhookId, target_endpoint_id: EndpointId
) -> dict[str, Any]:
    """Also deliver this webhook to another endpoint of your human or of an approved
    friend (idempotent). Any refusal is one uniform forbidden."""
    return await webhooks.add_route(ctx.runtime, ctx.endpoint, webhook_id, target_endpoint_id)


async def list_webhook_routes(ctx: ToolContext, webhook_id: WebhookId) -> dict[str, Any]:
    """List a webhook's extra delivery targets."""
    return await webhooks.list_routes(ctx.runtime, ctx.endpoint, webhook_id)


async def remove_webhook_route(
    ctx: ToolContext, webhook_id: WebhookId, target_endpoint_id: EndpointId
) -> dict[str, Any]:
    """Stop delivering this webhook to an endpoint (idempotent)."""
    return await webhooks.remove_route(ctx.runtime, ctx.endpoint, webhook_id, target_endpoint_id)


async def list_webhook_refusals(
    ctx: ToolContext,
    webhook_id: WebhookId,
    limit: Annotated[
        int | None, Field(description="How many, newest first (default 20, at most those kept)")
    ] = None,
) -> dict[str, Any]:
    """Deliveries this webhook refused (401), newest first: when, the reason code
    (missing_header, mismatch, stale_timestamp, ...), the source's words, the delivery id,
    source IP, size and sanitized headers (never the body). The last [ingest] refusals_kept
    (default 100) are kept; total counts every refusal."""
    return await refusals.list_refusals(ctx.runtime, ctx.endpoint, webhook_id, limit=limit)


TOOLS = (
    create_webhook,
    list_webhooks,
    rotate_webhook,
    delete_webhook,
    add_webhook_route,
    list_webhook_routes,
    remove_webhook_route,
    list_webhook_refusals,
)
