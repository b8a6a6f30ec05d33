"""The generic source: token trust, delivery-id precedence and the body-key fallback."""

from __future__ import annotations

from typing import Any

import pytest
from switchboard_generic.source import GenericSource, kind_from_headers

from switchboard.plugin import TRUST_TOKEN, Delivery, Headers, body_key, long_id_key


def deliver(body: bytes, headers: dict[str, str]) -> Delivery:
    return Delivery(Headers(headers), body)


BODY = b'{"alert":"disk"}'
LONG = "x" * 257

CASES = [
    # (id, headers, expected id; None = the body key)
    (
        "X-Delivery-Id first",
        {"X-Delivery-Id": "a", "Webhook-Id": "b", "X-GitHub-Delivery": "c"},
        "a",
    ),
    (
        "Webhook-Id second",
        {"Webhook-Id": "b", "X-GitHub-Delivery": "c", "X-Gitea-Delivery": "d"},
        "b",
    ),
    ("X-GitHub-Delivery third", {"X-GitHub-Delivery": "c", "X-Gitea-Delivery": "d"}, "c"),
    ("X-Gitea-Delivery last", {"X-Gitea-Delivery": "d"}, "d"),
    ("over-long X-Delivery-Id ignored", {"X-Delivery-Id": LONG, "Webhook-Id": "b"}, "b"),
    (
        "every id over-long: the first one's hash",
        {"X-Delivery-Id": LONG, "Webhook-Id": LONG},
        long_id_key(LONG),
    ),
    ("empty X-Delivery-Id ignored", {"X-Delivery-Id": "", "Webhook-Id": "b"}, "b"),
    ("case-insensitive", {"x-delivery-id": "a"}, "a"),
    ("no id at all", {}, None),
]


@pytest.mark.parametrize("headers,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_delivery_id_precedence(headers: dict[str, str], expected: str | None) -> None:
    result = GenericSource().verify(deliver(BODY, headers), None, 0.0)
    assert result.delivery_id == (expected if expected is not None else body_key(BODY))


@pytest.mark.parametrize("secret", [None, b"", b"ignored"])
def test_token_trust_is_ok_but_never_verified(secret: bytes | None) -> None:
    source = GenericSource()
    result = source.verify(deliver(b"not even json", {}), secret, 0.0)
    assert source.trust_mode == TRUST_TOKEN
    assert result.ok and not result.verified


KIND_CASES = [
    # (id, headers, kind): the well-known producers' event headers, in this order
    (
        "github header first",
        {"X-GitHub-Event": "issues", "X-Gitea-Event": "push", "X-Cairn-Event": "x"},
        "issues",
    ),
    ("gitea header second", {"X-Gitea-Event": "push", "X-Cairn-Event": "x"}, "push"),
    ("cairn header last", {"X-Cairn-Event": "artifact.created"}, "artifact.created"),
    ("empty values skipped", {"X-GitHub-Event": "", "X-Gitea-Event": "push"}, "push"),
    ("case-insensitive names", {"x-github-event": "ping"}, "ping"),
    ("none", {"X-Event": "custom"}, None),
    ("no headers", {}, None),
]


@pytest.mark.parametrize(
    "headers,kind", [c[1:] for c in KIND_CASES], ids=[c[0] for c in KIND_CASES]
)
def test_kind_precedence(headers: dict[str, str], kind: str | None) -> None:
    assert kind_from_headers(Headers(headers)) == kind
    assert GenericSource().verify(deliver(BODY, headers), None, 0.0).kind == kind
    assert GenericSource().identify(Headers(headers), BODY).kind == kind


def test_recorded_fixture(recorded: Any) -> None:
    fixture = recorded("generic_alert")
    result = GenericSource().verify(fixture.delivery(), None, 0.0)
    assert result.ok and result.delivery_id == "alert-7731-db-3" and result.kind is None
