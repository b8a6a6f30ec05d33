"""The ``shopify`` preset: recorded deliveries, every forgery, dedup, the ``.shopify`` projection."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from importlib import import_module
from typing import Any

import pytest
from sbpresets import create, fixture, post, source, token_of, verify

from switchboard.plugin import REASONS
from switchboard.runtime import Runtime
from switchboard.sources import Delivery, Headers

NAME = "shopify"
PACKAGE = "switchboard_shopify"
SECRET = "shpss_TEST_switchboard_fixture_secret"  # the fixtures' documented test secret
OTHER = "shpss_TEST_some_other_apps_secret"
AT = 1796040000  # any time at all: Shopify signs no timestamp
SIG = "X-Shopify-Hmac-Sha256"


def order() -> tuple[dict[str, str], bytes]:
    return fixture(PACKAGE, "orders_create")


def _b64mac(key: str, body: bytes) -> str:
    return base64.b64encode(hmac.new(key.encode(), body, hashlib.sha256).digest()).decode()


@pytest.mark.parametrize(
    ("name", "kind", "delivery_id"),
    [
        ("orders_create", "orders/create", "0b3f6e2a-5d1c-4a7e-9f08-2c6d1e4b7a93"),
        ("products_update", "products/update", "e8d4a1b7-3c2f-4e96-b05a-1f7c3d9e2a64"),
    ],
)
async def test_the_recorded_deliveries_verify(
    preset_runtime: Runtime, name: str, kind: str, delivery_id: str
) -> None:
    headers, body = fixture(PACKAGE, name)
    verdict = verify(source(preset_runtime, NAME), headers, body, SECRET, AT)
    assert verdict.ok and verdict.verified, verdict.detail
    assert verdict.kind == kind
    assert verdict.delivery_id == delivery_id  # X-Shopify-Webhook-Id


async def test_no_clock_applies(preset_runtime: Runtime) -> None:
    # Shopify signs no timestamp (X-Shopify-Triggered-At is not signed), so there is no
    # stale or future delivery to refuse: a recorded one verifies whenever it arrives, and a
    # replay is absorbed by its delivery id (see the end-to-end test), not by a clock.
    headers, body = order()
    for now in (0, AT, AT + 10 * 365 * 86400):
        assert verify(source(preset_runtime, NAME), headers, body, SECRET, now).ok


def _forged(headers: dict[str, str], body: bytes) -> list[tuple[str, dict[str, str], bytes, str]]:
    """Each forgery class: (what, headers, body, secret) and it must be refused.

    Timestamps do not apply (none is signed); nor do ids: only the body is signed.
    """
    good = headers[SIG]
    _, other_body = fixture(PACKAGE, "products_update")
    return [
        ("wrong secret", headers, body, OTHER),
        (
            "tampered body",
            headers,
            body.replace(b'"total_price":"58.99"', b'"total_price":"0.01"'),
            SECRET,
        ),
        ("body swapped for another signed one", headers, other_body, SECRET),
        (f"missing {SIG}", {k: v for k, v in headers.items() if k != SIG}, body, SECRET),
        ("empty signature", {**headers, SIG: ""}, body, SECRET),
        ("garbage signature", {**headers, SIG: "not base64 at all!"}, body, SECRET),
        ("truncated signature", {**headers, SIG: good[:-4]}, body, SECRET),
        (
            "hex instead of base64",
            {**headers, SIG: hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()},
            body,
            SECRET,
        ),
        ("signed with another key", {**headers, SIG: _b64mac(OTHER, body)}, body, SECRET),
        ("a prefix Shopify never sends", {**headers, SIG: "sha256=" + good}, body, SECRET),
    ]


@pytest.mark.parametrize("case", range(10))
async def test_every_forgery_is_refused(preset_runtime: Runtime, case: int) -> None:
    headers, body = order()
    what, h, b, secret = _forged(headers, body)[case]
    verdict = verify(source(preset_runtime, NAME), h, b, secret, AT)
    assert not verdict.ok, what
    assert verdict.detail, what
    assert verdict.reason in REASONS and verdict.reason != "other", (what, verdict.reason)
    assert SECRET not in verdict.detail and headers[SIG] not in verdict.detail


async def test_a_second_signature_cannot_be_sent(preset_runtime: Runtime) -> None:
    # Shopify sends exactly one signature: the header is one base64 value, no list. Two
    # values joined by a comma (what a proxy makes of a repeated header) are one wrong value,
    # even when one of them is right; of two header lines only the first counts.
    src = source(preset_runtime, NAME)
    headers, body = order()
    good = headers[SIG]
    for joined in (f"{good}, {good}", f"AAAA, {good}", f"{good},AAAA"):
        verdict = verify(src, {**headers, SIG: joined}, body, SECRET, AT)
        assert not verdict.ok and verdict.detail == "signature mismatch", joined
    lines = [(k, v) for k, v in headers.items() if k != SIG] + [(SIG, "AAAA"), (SIG, good)]
    assert not src.verify(Delivery(Headers(lines), body), SECRET.encode(), AT).ok


async def test_the_delivery_id_falls_back_to_the_event_id(preset_runtime: Runtime) -> None:
    src = source(preset_runtime, NAME)
    headers, body = order()
    no_webhook_id = {k: v for k, v in headers.items() if k != "X-Shopify-Webhook-Id"}
    assert (
        verify(src, no_webhook_id, body, SECRET, AT).delivery_id
        == "7c1e4f08-9a2b-4d3c-8e5f-6a7b8c9d0e1f"
    )
    neither = {k: v for k, v in no_webhook_id.items() if k != "X-Shopify-Event-Id"}
    assert (
        verify(src, neither, body, SECRET, AT).delivery_id
        == "sha256:" + hashlib.sha256(body).hexdigest()
    )


async def test_end_to_end_with_the_producers_own_secret_and_dedup(
    preset_runtime: Runtime,
) -> None:
    rt = preset_runtime
    created = await create(rt, NAME, SECRET)
    assert "signing_secret" not in created and created["signing_secret_imported"] is True
    body = json.dumps(
        {
            "id": 5975318396986,
            "name": "#1043",
            "email": "ada@example.com",
            "financial_status": "pending",
            "total_price": "12.00",
            "currency": "GBP",
            "tags": "",
        }
    ).encode()
    headers: dict[str, Any] = source(rt, NAME).sign(
        body, SECRET.encode(), "orders/create", delivery_id="wh-one", now=time.time()
    )
    assert headers["X-Shopify-Webhook-Id"] == "wh-one"
    assert headers[SIG] == _b64mac(SECRET, body)  # what Shopify itself would send
    first = await post(rt, token_of(created), headers, body)
    assert first.status == 202, first.body
    assert [t["created"] for t in first.body["todos"]] == [True]
    again = await post(rt, token_of(created), headers, body)  # Shopify retries
    assert again.status == 202
    assert [t["created"] for t in again.body["todos"]] == [False]  # one event, by webhook id
    row = await rt.store.db.fetchone(
        "SELECT kind, external_id FROM events WHERE webhook_id = %s", (created["webhook_id"],)
    )
    assert row is not None and row["kind"] == "orders/create"
    assert str(row["external_id"]).endswith(":wh-one")
    forged = {**headers, SIG: _b64mac(OTHER, body)}
    assert (await post(rt, token_of(created), forged, body)).status == 401
    tampered = body.replace(b"12.00", b"0.01")
    assert (await post(rt, token_of(created), headers, tampered)).status == 401


# --------------------------------------------------------------------------------------
# .shopify
# --------------------------------------------------------------------------------------


def _build(kind: str | None, payload: Any) -> dict[str, Any] | None:
    built: dict[str, Any] | None = import_module(PACKAGE).build_shopify(NAME, kind, payload)
    return built


def test_the_projection_of_an_order(preset_site: Any) -> None:
    _, body = order()
    built = _build("orders/create", json.loads(body))
    assert built == {
        "topic": "orders/create",
        "resource": "orders",
        "id": 5975318396985,
        "admin_graphql_api_id": "gid://shopify/Order/5975318396985",
        "name": "#1042",
        "title": None,
        "email": "ada@example.com",
        "financial_status": "paid",
        "fulfillment_status": None,
        "total_price": "58.99",
        "currency": "GBP",
        "status": None,
        "vendor": None,
        "product_type": None,
        "handle": None,
        "updated_at": "2026-11-30T12:00:04+00:00",
        "test": False,
        "customer_id": 7412587896889,
        "tags": ["gift", "wholesale"],
        "summary": "orders/create #1042",
    }
    assert set(built) == set(import_module(PACKAGE).SHOPIFY_KEYS)


def test_the_projection_of_a_product(preset_site: Any) -> None:
    _, body = fixture(PACKAGE, "products_update")
    built = _build("products/update", json.loads(body))
    assert built is not None
    assert {
        k: built[k]
        for k in (
            "resource",
            "id",
            "title",
            "name",
            "status",
            "vendor",
            "product_type",
            "handle",
            "tags",
            "summary",
            "email",
            "financial_status",
            "customer_id",
        )
    } == {
        "resource": "products",
        "id": 8843066081337,
        "title": "Enamel Camp Mug",
        "name": None,
        "status": "active",
        "vendor": "Northwind Goods",
        "product_type": "Mugs",
        "handle": "enamel-camp-mug",
        "tags": ["camping", "enamel", "winter-sale"],
        "summary": "products/update Enamel Camp Mug",
        "email": None,
        "financial_status": None,
        "customer_id": None,
    }


def test_the_projection_never_trusts_types(preset_site: Any) -> None:
    assert _build("orders/create", [1, 2]) is None
    assert _build("orders/create", "text") is None
    odd = _build(
        None,
        {"id": True, "name": 7, "email": ["x"], "test": "yes", "customer": {"id": "12"}, "tags": 3},
    )
    assert odd is not None
    assert odd["id"] is None and odd["name"] is None and odd["email"] is None
    assert odd["test"] is None and odd["customer_id"] is None and odd["tags"] is None
    assert odd["topic"] is None and odd["resource"] is None and odd["summary"] is None
    customer = _build(
        "customers/create",
        {"id": 7412587896889, "email": "ada@example.com", "tags": ["vip", " ", "new"]},
    )
    assert customer is not None
    assert customer["summary"] == "customers/create ada@example.com"
    assert customer["tags"] == ["vip", "new"] and customer["resource"] == "customers"


async def test_the_projection_end_to_end(preset_runtime: Runtime) -> None:
    # The recorded delivery itself, through ingest: the todo carries .shopify and its title.
    rt = preset_runtime
    created = await create(rt, NAME, SECRET)
    headers, body = order()
    reply = await post(rt, token_of(created), headers, body)
    assert reply.status == 202, reply.body
    [todo] = reply.body["todos"]
    row = await rt.store.db.fetchone(
        "SELECT title, payload FROM todos WHERE id = %s", (todo["id"],)
    )
    assert row is not None and row["title"] == "orders/create #1042"
    shop = row["payload"]["shopify"]
    assert shop["admin_graphql_api_id"] == "gid://shopify/Order/5975318396985"
    assert shop["financial_status"] == "paid" and shop["tags"] == ["gift", "wholesale"]
    assert row["payload"]["kind"] == "orders/create"
    event = await rt.store.db.fetchone(
        "SELECT external_id, headers FROM events WHERE webhook_id = %s", (created["webhook_id"],)
    )
    assert event is not None
    assert str(event["external_id"]).endswith(":0b3f6e2a-5d1c-4a7e-9f08-2c6d1e4b7a93")
    stored = {k.lower(): v for k, v in dict(event["headers"]).items()}
    assert stored[SIG.lower()] != headers[SIG]  # the signature is never stored
