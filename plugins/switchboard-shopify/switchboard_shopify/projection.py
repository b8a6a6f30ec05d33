"""The ``.shopify`` projection: what rules about orders, products and customers usually need.

A Shopify webhook body is the resource itself (an order, a product, a customer ...) and the
topic (``orders/create``) is the delivery's kind. Fields of another type than Shopify sends
read as null, so a rule comparing strings never faults on a surprise. Money stays the
decimal string Shopify sends (``"199.00"``, never a float); ids stay the integers Shopify
sends, next to the resource's ``admin_graphql_api_id`` (``gid://shopify/Order/...``).
"""

from __future__ import annotations

from typing import Any

from switchboard.plugin import Projection

#: Top-level strings, as Shopify names them (orders, products, customers and the like).
_STRINGS = (
    "admin_graphql_api_id",
    "name",
    "title",
    "email",
    "financial_status",
    "fulfillment_status",
    "total_price",
    "currency",
    "status",
    "vendor",
    "product_type",
    "handle",
    "updated_at",
)

SHOPIFY_KEYS = ("topic", "resource", "id", *_STRINGS, "test", "customer_id", "tags", "summary")


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    # bool is an int in Python but never an id.
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _tags(value: Any) -> list[str] | None:
    """Shopify's ``tags``: one comma-separated string (``"vip, wholesale"``) as a list."""
    if isinstance(value, str):
        return [tag for part in value.split(",") if (tag := part.strip())]
    if isinstance(value, list):
        return [tag for item in value if isinstance(item, str) and (tag := item.strip())]
    return None


def build_shopify(source: str, kind: str | None, payload: Any) -> dict[str, Any] | None:
    """The ``.shopify`` projection of a Shopify webhook body, or None when it is no object.

    ``summary`` (the todo's title) is the topic and what names the resource: an order's
    ``name`` (``orders/create #1001``), a product's ``title``, else its email or id.
    """
    if not isinstance(payload, dict):
        return None
    topic = kind or None
    out: dict[str, Any] = {
        "topic": topic,
        "resource": topic.split("/", 1)[0] if topic and "/" in topic else None,
        "id": _int(payload.get("id")),
    }
    out.update({key: _str(payload.get(key)) for key in _STRINGS})
    test = payload.get("test")
    out["test"] = test if isinstance(test, bool) else None
    customer = payload.get("customer")
    out["customer_id"] = _int(customer.get("id")) if isinstance(customer, dict) else None
    out["tags"] = _tags(payload.get("tags"))
    label = (
        out["name"]
        or out["title"]
        or out["email"]
        or (str(out["id"]) if out["id"] is not None else None)
    )
    out["summary"] = " ".join(part for part in (topic, label) if part) or None
    return out


SHOPIFY_PROJECTION = Projection(
    name="shopify",
    sources=("shopify",),
    keys=SHOPIFY_KEYS,
    build=build_shopify,
    title_key="summary",
)
