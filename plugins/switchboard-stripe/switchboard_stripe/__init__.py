"""Switchboard preset: the ``stripe`` source (https://docs.stripe.com/webhooks).

Stripe sends ``Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>...][,v0=<hex>]``: ``v1``
entries are hex HMAC-SHA256 over ``{t}.{body}``, keyed by the endpoint's whole signing
secret (``whsec_...``, its bytes as they are, not decoded). Several ``v1`` entries arrive
while the producer rolls its secret, and any one valid is enough; ``v0`` (a fake signature
Stripe adds to test-mode events) is never accepted. Timestamps more than 5 minutes away
from the receiver's clock are refused. Import the endpoint's secret with ``webhook create
--source stripe --secret-file F``. The delivery id is the event's ``id`` (``evt_...``, the
same on every retry); the kind is its ``type``.

The ``.stripe`` projection gives rules the event's handy fields (``.stripe.type``,
``.stripe.object``, ``.stripe.customer``, ...) without digging through ``.payload.data``.
"""

from __future__ import annotations

from typing import Any

from switchboard.plugin import (
    HmacSource,
    Projection,
    ProjectionRegistry,
    SourceRegistry,
    hookimpl,
)

__all__ = ["SCHEME", "STRIPE_KEYS", "STRIPE_PROJECTION", "build_stripe"]

#: Stripe's scheme (docs.stripe.com/webhooks#verify-manually).
SCHEME = {
    "signature_header": "Stripe-Signature",
    "signature_separator": ",",
    "signature_prefix": "v1=",
    "encoding": "hex",
    "signed": "{t}.{body}",
    "secret_encoding": "raw",
    "timestamp": {"entry": "t="},
    "tolerance_seconds": 300,
    "delivery_id": [{"pointer": "/id"}],
    "kind": [{"pointer": "/type"}],
}

#: What ``.stripe`` holds (null when the event does not say).
STRIPE_KEYS = (
    "event_id",  # evt_...
    "type",  # payment_intent.succeeded
    "created",  # the event's Unix time
    "livemode",  # true for live-mode events
    "account",  # the connected account (acct_...) of a Connect event
    "api_version",  # the API version the event's object is rendered in
    "object",  # what data.object is: payment_intent, subscription, invoice, ...
    "object_id",  # its id: pi_..., sub_..., in_...
    "customer",  # data.object.customer when it is an id (cus_...)
    "status",  # data.object.status: succeeded, canceled, past_due, ...
    "request_id",  # the API request that caused it (req_...), null when automatic
    "title",  # "<type> <object_id>": what the event's todos are titled
)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def build_stripe(source: str, kind: str | None, payload: Any) -> dict[str, Any] | None:
    """The ``.stripe`` projection of a Stripe event, or None when the body is no event.

    Snapshot events (``"object": "event"``) carry their object in ``data.object``; thin
    events (``"object": "v2.core.event"``) only name it in ``related_object``, and say the
    connected account in ``context``.
    """
    if not isinstance(payload, dict) or payload.get("object") not in ("event", "v2.core.event"):
        return None
    if payload["object"] == "event":
        obj = _dict(_dict(payload.get("data")).get("object"))
        object_kind, account = _str(obj.get("object")), _str(payload.get("account"))
    else:  # a thin event: its object is only named, and has no customer or status here
        related = _dict(payload.get("related_object"))
        obj = {"id": related.get("id")}
        object_kind, account = _str(related.get("type")), _str(payload.get("context"))
    event_type = _str(payload.get("type"))
    object_id = _str(obj.get("id"))
    livemode = payload.get("livemode")
    request = payload.get("request")
    return {
        "event_id": _str(payload.get("id")),
        "type": event_type,
        "created": _int(payload.get("created")),
        "livemode": livemode if isinstance(livemode, bool) else None,
        "account": account,
        "api_version": _str(payload.get("api_version")),
        "object": object_kind,
        "object_id": object_id,
        # an expanded customer is an object; rules want its id either way
        "customer": _str(obj.get("customer")) or _str(_dict(obj.get("customer")).get("id")),
        "status": _str(obj.get("status")),
        # an object since API version 2017-05-25, the request id itself before
        "request_id": _str(request) or _str(_dict(request).get("id")),
        "title": " ".join(p for p in (event_type, object_id) if p) or None,
    }


STRIPE_PROJECTION = Projection(
    name="stripe",
    sources=("stripe",),
    keys=STRIPE_KEYS,
    build=build_stripe,
    title_key="title",
)


@hookimpl
def switchboard_register_sources(register: SourceRegistry) -> None:
    """Register the ``stripe`` source."""
    register.add(HmacSource("stripe", SCHEME))


@hookimpl
def switchboard_register_projections(register: ProjectionRegistry) -> None:
    """Fill ``.stripe`` for Stripe events."""
    register.add(STRIPE_PROJECTION)
