"""The ``standardwebhooks`` preset: the spec's own vector, every forgery, dedup, end to end."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from sbpresets import create, fixture, post, source, token_of, verify

from switchboard.plugin import REASONS, Headers
from switchboard.runtime import Runtime

NAME = "standardwebhooks"
PACKAGE = "switchboard_standardwebhooks"
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # the spec's test secret
AT = 1614265330  # the vector's webhook-timestamp
OTHER = "whsec_dGhpcyBpcyBhbm90aGVyIHNlY3JldCBrZXkhIQ=="


def vector() -> tuple[dict[str, str], bytes]:
    return fixture(PACKAGE, "spec_vector")


async def test_the_specifications_vector_verifies(preset_runtime: Runtime) -> None:
    headers, body = vector()
    verdict = verify(source(preset_runtime, NAME), headers, body, SECRET, AT)
    assert verdict.ok and verdict.verified
    assert verdict.delivery_id == "msg_p5jXN8AQM9LWM0D4loKWxJek"


def _forged(
    headers: dict[str, str], body: bytes
) -> list[tuple[str, dict[str, str], bytes, str, float]]:
    """Each forgery class: (what, headers, body, secret, now) and it must be refused."""
    without = {k: v for k, v in headers.items()}
    cases = [
        ("wrong secret", headers, body, OTHER, AT),
        ("stale timestamp", headers, body, SECRET, AT + 301),
        ("future timestamp", headers, body, SECRET, AT - 301),
        ("tampered body", headers, body.replace(b"2432232314", b"2432232315"), SECRET, AT),
        (
            "timestamp changed (it is signed)",
            {**headers, "webhook-timestamp": str(AT + 1)},
            body,
            SECRET,
            AT,
        ),
        ("id changed (it is signed)", {**headers, "webhook-id": "msg_other"}, body, SECRET, AT),
        (
            "wrong version prefix",
            {**headers, "webhook-signature": headers["webhook-signature"].replace("v1,", "v2,")},
            body,
            SECRET,
            AT,
        ),
    ]
    for missing in ("webhook-signature", "webhook-timestamp", "webhook-id"):
        cut = {k: v for k, v in without.items() if k != missing}
        cases.append((f"missing {missing}", cut, body, SECRET, AT))
    return cases


@pytest.mark.parametrize("case", range(10))
async def test_every_forgery_is_refused(preset_runtime: Runtime, case: int) -> None:
    headers, body = vector()
    what, h, b, secret, now = _forged(headers, body)[case]
    verdict = verify(source(preset_runtime, NAME), h, b, secret, now)
    assert not verdict.ok, what
    assert verdict.detail, what
    assert verdict.reason in REASONS and verdict.reason != "other", (what, verdict.reason)


async def test_a_second_signature_may_be_the_valid_one(preset_runtime: Runtime) -> None:
    headers, body = vector()
    good = headers["webhook-signature"]
    both = {**headers, "webhook-signature": f"v1,c29tZXRoaW5nIGVsc2U= {good}"}
    assert verify(source(preset_runtime, NAME), both, body, SECRET, AT).ok
    only_bad = {**headers, "webhook-signature": "v1,c29tZXRoaW5nIGVsc2U= v1a,xyz"}
    assert not verify(source(preset_runtime, NAME), only_bad, body, SECRET, AT).ok


async def test_end_to_end_with_the_producers_own_secret_and_dedup(
    preset_runtime: Runtime,
) -> None:
    rt = preset_runtime
    created = await create(rt, NAME, SECRET)
    assert "signing_secret" not in created and created["signing_secret_imported"] is True
    body = json.dumps(
        {"type": "invoice.paid", "timestamp": "2026-11-30T12:00:00Z", "data": {"id": "in_1"}}
    ).encode()
    headers: dict[str, Any] = source(rt, NAME).sign(
        body, SECRET.encode(), None, delivery_id="msg_one", now=time.time()
    )
    first = await post(rt, token_of(created), headers, body)
    assert first.status == 202, first.body
    assert [t["created"] for t in first.body["todos"]] == [True]
    again = await post(rt, token_of(created), headers, body)  # the producer retries
    assert again.status == 202
    assert [t["created"] for t in again.body["todos"]] == [False]  # one event, by webhook-id
    row = await rt.store.db.fetchone(
        "SELECT kind, external_id FROM events WHERE webhook_id = %s", (created["webhook_id"],)
    )
    assert row is not None and row["kind"] == "invoice.paid"
    assert str(row["external_id"]).endswith(":msg_one")
    forged = {**headers, "webhook-signature": "v1,AAAA"}
    assert (await post(rt, token_of(created), forged, body)).status == 401


def _svix(headers: dict[str, str]) -> dict[str, str]:
    """The same delivery as Svix (and Clerk and Resend, through it) brands it."""
    return {k.replace("webhook-", "svix-"): v for k, v in headers.items()}


async def test_svix_branded_headers_verify_like_the_specs(preset_runtime: Runtime) -> None:
    headers, body = vector()
    svix = _svix(headers)
    assert "svix-signature" in svix and "webhook-signature" not in svix
    verdict = verify(source(preset_runtime, NAME), svix, body, SECRET, AT)
    assert verdict.ok and verdict.verified
    assert verdict.delivery_id == "msg_p5jXN8AQM9LWM0D4loKWxJek"
    ident = source(preset_runtime, NAME).identify(Headers(svix), body)
    assert ident.delivery_id == "msg_p5jXN8AQM9LWM0D4loKWxJek"


@pytest.mark.parametrize("case", range(10))
async def test_every_svix_branded_forgery_is_refused(preset_runtime: Runtime, case: int) -> None:
    headers, body = vector()
    what, h, b, secret, now = _forged(headers, body)[case]
    if "missing webhook-signature" in what:
        h = {**h, "webhook-id": headers["webhook-id"]}  # no signature in either family
    verdict = verify(source(preset_runtime, NAME), _svix(h), b, secret, now)
    assert not verdict.ok, what


async def test_the_families_do_not_mix(preset_runtime: Runtime) -> None:
    headers, body = vector()
    # the spec's signature with Svix's id and timestamp: read as the spec's, so its own
    # id and timestamp are missing
    mixed = {
        "webhook-signature": headers["webhook-signature"],
        "svix-id": headers["webhook-id"],
        "svix-timestamp": headers["webhook-timestamp"],
    }
    assert not verify(source(preset_runtime, NAME), mixed, body, SECRET, AT).ok


async def test_a_svix_branded_delivery_through_the_receiver_dedups_by_svix_id(
    preset_runtime: Runtime,
) -> None:
    rt = preset_runtime
    created = await create(rt, NAME, SECRET)
    body = json.dumps({"type": "user.created", "data": {"id": "user_1"}}).encode()
    signed = source(rt, NAME).sign(
        body, SECRET.encode(), None, delivery_id="msg_svix", now=time.time()
    )
    headers = _svix(dict(signed))
    first = await post(rt, token_of(created), headers, body)
    assert first.status == 202, first.body
    again = await post(rt, token_of(created), headers, body)
    assert [t["created"] for t in again.body["todos"]] == [False]
    row = await rt.store.db.fetchone(
        "SELECT kind, external_id FROM events WHERE webhook_id = %s", (created["webhook_id"],)
    )
    assert row is not None and row["kind"] == "user.created"
    assert str(row["external_id"]).endswith(":msg_svix")
    forged = {**headers, "svix-signature": "v1,AAAA"}
    assert (await post(rt, token_of(created), forged, body)).status == 401
