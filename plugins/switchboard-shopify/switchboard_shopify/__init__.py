"""Switchboard preset: the ``shopify`` source (https://shopify.dev/docs/apps/build/webhooks).

Shopify signs each webhook with ``X-Shopify-Hmac-Sha256``: the base64 HMAC-SHA256 of the
raw body, keyed by the app's client secret as it is (no ``whsec_``, no decoding). Nothing
else is signed and Shopify sends no signed timestamp, so a recorded delivery stays valid:
replays are absorbed by the delivery id, not refused by a clock. Import the client secret
with ``webhook create --source shopify --secret-file F``.

The delivery id is ``X-Shopify-Webhook-Id`` (the same on every retry of one webhook), else
``X-Shopify-Event-Id`` (the event behind it); the event kind is the topic,
``X-Shopify-Topic`` (``orders/create``, ``products/update``, ...). The ``.shopify``
projection lifts the resource's common fields for rules (see :mod:`.projection`).
"""

from __future__ import annotations

from switchboard.plugin import HmacSource, ProjectionRegistry, SourceRegistry, hookimpl

from .projection import SHOPIFY_KEYS, SHOPIFY_PROJECTION, build_shopify

__all__ = ["SCHEME", "SHOPIFY_KEYS", "build_shopify"]

#: Shopify's scheme ("Verify webhooks": HMAC-SHA256 of the raw body, base64).
SCHEME = {
    "signature_header": "X-Shopify-Hmac-Sha256",
    "encoding": "base64",
    "signed": "{body}",
    "secret_encoding": "raw",
    "delivery_id": [{"header": "X-Shopify-Webhook-Id"}, {"header": "X-Shopify-Event-Id"}],
    "kind": [{"header": "X-Shopify-Topic"}],
}


@hookimpl
def switchboard_register_sources(register: SourceRegistry) -> None:
    """Register the ``shopify`` source."""
    register.add(HmacSource("shopify", SCHEME))


@hookimpl
def switchboard_register_projections(register: ProjectionRegistry) -> None:
    """Fill ``.shopify`` for Shopify deliveries."""
    register.add(SHOPIFY_PROJECTION)
