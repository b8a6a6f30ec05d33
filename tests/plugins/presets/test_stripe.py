"""The ``stripe`` preset: recorded-style events, every forgery, rolling secrets, dedup, ``.stripe``."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from sbpresets import create, fixture, post, source, token_of, verify

from switchboard.plugin import REASONS
from switchboard.runtime import Runtime

NAME = "stripe"
PACKAGE = "switchboard_stripe"
SECRET = "whsec_test_switchboard_fixture_0123456789abcdef"  # the fixtures' test secret
AT = 1764504000  # payment_intent_succeeded's t=
OTHER = "whsec_test_some_other_endpoint_fedcba9876543210"
#: Each fixture, its Stripe-Signature t= and its event id.
FIXTURES = {
    "payment_intent_succeeded": (AT, "evt_3QTb8kLx9YvR2mWq0h4TnB7d"),
    "customer_subscription_deleted": (AT + 60, "evt_1QTb8mGh7WkP4nZsXa2Rk9Ud"),
}


def recorded(name: str = "payment_intent_succeeded") -> tuple[dict[str, str], bytes]:
    return fixture(PACKAGE, name)


def entries(header: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for entry in header.split(","):
        key, _, value = entry.partition("=")
        out.setdefault(key, []).append(value)
    return out


@pytest.mark.parametrize("name", sorted(FIXTURES))
async def test_the_recorded_events_verify(preset_runtime: Runtime, name: str) -> None:
    headers, body = recorded(name)
    at, event_id = FIXTURES[name]
    assert entries(headers["stripe-signature"])["t"] == [str(at)]
    verdict = verify(source(preset_runtime, NAME), headers, body, SECRET, at)
    assert verdict.ok and verdict.verified, verdict.detail
    assert verdict.delivery_id == event_id == json.loads(body)["id"]
    assert verdict.kind == json.loads(body)["type"]
    # the signature covers the bytes as sent: Stripe's pretty-printed JSON, no newline
    assert body.startswith(b'{\n  "id": "evt_') and not body.endswith(b"\n")


def _forged(
    headers: dict[str, str], body: bytes
) -> list[tuple[str, dict[str, str], bytes, str, float]]:
    """Each forgery class: (what, headers, body, secret, now) and it must be refused."""
    sig = headers["stripe-signature"]
    parts = entries(sig)
    good = parts["v1"][0]
    bad_hex = "0" * 64

    def with_sig(value: str) -> dict[str, str]:
        return {**headers, "stripe-signature": value}

    return [
        ("wrong secret", headers, body, OTHER, AT),
        ("stale timestamp", headers, body, SECRET, AT + 301),
        ("future timestamp", headers, body, SECRET, AT - 301),
        ("tampered body", headers, body.replace(b'"amount": 4900', b'"amount": 4901'), SECRET, AT),
        (
            "body re-serialized (the signature covers the bytes)",
            headers,
            json.dumps(json.loads(body)).encode(),
            SECRET,
            AT,
        ),
        (
            "timestamp changed (it is signed)",
            with_sig(sig.replace(f"t={AT}", f"t={AT + 1}")),
            body,
            SECRET,
            AT,
        ),
        (
            "missing Stripe-Signature",
            {k: v for k, v in headers.items() if k != "stripe-signature"},
            body,
            SECRET,
            AT,
        ),
        ("missing timestamp entry", with_sig(f"v1={good}"), body, SECRET, AT),
        ("timestamp not a number", with_sig(f"t=soon,v1={good}"), body, SECRET, AT),
        ("no v1 entry", with_sig(f"t={AT}"), body, SECRET, AT),
        (
            "only a v0 entry, even a right one (v0 is never accepted)",
            with_sig(f"t={AT},v0={good}"),
            body,
            SECRET,
            AT,
        ),
        ("wrong scheme name", with_sig(f"t={AT},v2={good}"), body, SECRET, AT),
        ("garbage header", with_sig("garbage"), body, SECRET, AT),
        ("empty header", with_sig(""), body, SECRET, AT),
        ("a v1 that is not ours", with_sig(f"t={AT},v1={bad_hex}"), body, SECRET, AT),
        ("base64 instead of hex", with_sig(f"t={AT},v1=cXVpdGUgd3Jvbmc="), body, SECRET, AT),
    ]


FORGERIES = 16  # len(_forged(...)); the fixtures load only once the preset is installed


async def test_every_forgery_class_is_listed(preset_runtime: Runtime) -> None:
    assert len(_forged(*recorded())) == FORGERIES


@pytest.mark.parametrize("case", range(FORGERIES))
async def test_every_forgery_is_refused(preset_runtime: Runtime, case: int) -> None:
    headers, body = recorded()
    what, h, b, secret, now = _forged(headers, body)[case]
    verdict = verify(source(preset_runtime, NAME), h, b, secret, now)
    assert not verdict.ok, what
    assert verdict.detail, what
    assert verdict.reason in REASONS and verdict.reason != "other", (what, verdict.reason)
    assert (
        SECRET not in verdict.detail
        and entries(headers["stripe-signature"])["v1"][0] not in verdict.detail
    ), what


async def test_the_refusals_say_what_was_wrong(preset_runtime: Runtime) -> None:
    headers, body = recorded()
    src = source(preset_runtime, NAME)
    assert "stale" in str(verify(src, headers, body, SECRET, AT + 301).detail)
    assert "future" in str(verify(src, headers, body, SECRET, AT - 301).detail)
    assert "mismatch" in str(verify(src, headers, body, OTHER, AT).detail)
    assert "missing Stripe-Signature" in str(verify(src, {}, body, SECRET, AT).detail)
    assert "timestamp" in str(verify(src, {"stripe-signature": "garbage"}, body, SECRET, AT).detail)


async def test_the_tolerance_is_five_minutes_either_way(preset_runtime: Runtime) -> None:
    headers, body = recorded()
    src = source(preset_runtime, NAME)
    assert verify(src, headers, body, SECRET, AT + 300).ok
    assert verify(src, headers, body, SECRET, AT - 300).ok


async def test_a_second_signature_may_be_the_valid_one(preset_runtime: Runtime) -> None:
    """While the endpoint's secret rolls, Stripe signs with both: any one v1 is enough."""
    headers, body = recorded()
    good = entries(headers["stripe-signature"])["v1"][0]
    bad = "ab" * 32
    src = source(preset_runtime, NAME)
    for value in (
        f"t={AT},v1={bad},v1={good}",
        f"t={AT}, v1={bad}, v1={good}, v0={bad}",
        f"v1={bad},v1={good},t={AT}",
    ):
        assert verify(src, {**headers, "stripe-signature": value}, body, SECRET, AT).ok, value
    only_bad = {**headers, "stripe-signature": f"t={AT},v1={bad},v1={bad[::-1]},v0={good}"}
    assert not verify(src, only_bad, body, SECRET, AT).ok


async def test_the_projection_of_the_recorded_events(preset_runtime: Runtime) -> None:
    projection = preset_runtime.registries.projections.get("stripe:stripe")
    assert projection is not None and projection.title_key == "title"
    _, body = recorded("payment_intent_succeeded")
    assert projection.build(NAME, "payment_intent.succeeded", json.loads(body)) == {
        "event_id": "evt_3QTb8kLx9YvR2mWq0h4TnB7d",
        "type": "payment_intent.succeeded",
        "created": AT - 3,
        "livemode": False,
        "account": None,
        "api_version": "2024-06-20",
        "object": "payment_intent",
        "object_id": "pi_3QTb8kLx9YvR2mWq0F1aZc6e",
        "customer": "cus_RMb1vQy7TfK2Hd",
        "status": "succeeded",
        "request_id": "req_Wc4LfZ8nQ2xTbY",
        "title": "payment_intent.succeeded pi_3QTb8kLx9YvR2mWq0F1aZc6e",
    }
    _, body = recorded("customer_subscription_deleted")
    sub = projection.build(NAME, "customer.subscription.deleted", json.loads(body))
    assert sub is not None
    assert (sub["account"], sub["object"], sub["object_id"], sub["customer"], sub["status"]) == (
        "acct_1Oa9XyGh7WkP4nZs",
        "subscription",
        "sub_1QF2rTGh7WkP4nZs0cV8yL3m",
        "cus_R7hKp2Lm9QwX4v",
        "canceled",
    )


@pytest.mark.parametrize("payload", [None, [], "evt_1", {"id": "evt_1"}, {"object": "charge"}])
async def test_the_projection_is_null_for_what_is_no_event(
    preset_runtime: Runtime, payload: Any
) -> None:
    projection = preset_runtime.registries.projections.get("stripe:stripe")
    assert projection is not None and projection.build(NAME, None, payload) is None


async def test_the_projection_reads_odd_shapes_without_faulting(
    preset_runtime: Runtime,
) -> None:
    projection = preset_runtime.registries.projections.get("stripe:stripe")
    assert projection is not None
    expanded = {
        "object": "event",
        "id": "evt_1",
        "type": "invoice.paid",
        "livemode": 1,
        "request": "req_old",
        "data": {"object": {"id": "in_1", "object": "invoice", "customer": {"id": "cus_9"}}},
    }
    got = projection.build(NAME, "invoice.paid", expanded)
    assert got is not None
    assert (got["customer"], got["request_id"], got["livemode"]) == ("cus_9", "req_old", None)
    thin = {
        "object": "v2.core.event",
        "id": "evt_test_65R",
        "type": "v1.billing.meter.error",
        "context": "acct_2",
        "related_object": {"id": "mtr_1", "type": "billing.meter"},
    }
    got = projection.build(NAME, "v1.billing.meter.error", thin)
    assert got is not None
    assert (got["account"], got["object"], got["object_id"]) == ("acct_2", "billing.meter", "mtr_1")
    broken = {"object": "event", "data": [1], "type": 7, "request": {"id": 3}}
    got = projection.build(NAME, None, broken)
    assert got is not None and got["title"] is None and got["object_id"] is None


async def test_end_to_end_with_the_producers_own_secret_and_dedup(
    preset_runtime: Runtime,
) -> None:
    rt = preset_runtime
    created = await create(rt, NAME, SECRET)
    assert "signing_secret" not in created and created["signing_secret_imported"] is True
    _, recorded_body = recorded()
    doc = json.loads(recorded_body)
    doc["id"] = "evt_end_to_end_1"
    body = json.dumps(doc, indent=2).encode()
    headers: dict[str, Any] = source(rt, NAME).sign(body, SECRET.encode(), None, now=time.time())
    assert set(entries(headers["Stripe-Signature"])) == {"t", "v1"}
    first = await post(rt, token_of(created), headers, body)
    assert first.status == 202, first.body
    assert [t["created"] for t in first.body["todos"]] == [True]
    again = await post(rt, token_of(created), headers, body)  # Stripe retries the event
    assert again.status == 202
    assert [t["created"] for t in again.body["todos"]] == [False]  # one event, by its evt_ id
    row = await rt.store.db.fetchone(
        "SELECT kind, external_id FROM events WHERE webhook_id = %s", (created["webhook_id"],)
    )
    assert row is not None and row["kind"] == "payment_intent.succeeded"
    assert str(row["external_id"]).endswith(":evt_end_to_end_1")
    todo = await rt.store.db.fetchone(
        "SELECT title, payload FROM todos WHERE id = %s", (first.body["todos"][0]["id"],)
    )
    assert todo is not None
    assert todo["title"] == "payment_intent.succeeded pi_3QTb8kLx9YvR2mWq0F1aZc6e"
    stripe = todo["payload"]["stripe"]
    assert (stripe["event_id"], stripe["object"], stripe["customer"], stripe["livemode"]) == (
        "evt_end_to_end_1",
        "payment_intent",
        "cus_RMb1vQy7TfK2Hd",
        False,
    )
    forged = {**headers, "Stripe-Signature": f"t={int(time.time())},v1={'0' * 64}"}
    assert (await post(rt, token_of(created), forged, body)).status == 401
    wrong_key = source(rt, NAME).sign(body, OTHER.encode(), None, now=time.time())
    assert (await post(rt, token_of(created), wrong_key, body)).status == 401


async def test_the_recorded_event_end_to_end_at_its_own_time(
    preset_runtime: Runtime,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fixture's own bytes and headers, posted when they were signed, as Stripe sent them."""
    rt = preset_runtime
    created = await create(rt, NAME, SECRET)
    headers, body = recorded("customer_subscription_deleted")
    monkeypatch.setattr(time, "time", lambda: AT + 61.0)
    reply = await post(rt, token_of(created), headers, body)
    assert reply.status == 202, reply.body
    todo = await rt.store.db.fetchone(
        "SELECT title, payload FROM todos WHERE id = %s", (reply.body["todos"][0]["id"],)
    )
    assert todo is not None
    assert todo["title"] == "customer.subscription.deleted sub_1QF2rTGh7WkP4nZs0cV8yL3m"
    assert todo["payload"]["kind"] == "customer.subscription.deleted"
    assert todo["payload"]["stripe"]["account"] == "acct_1Oa9XyGh7WkP4nZs"
