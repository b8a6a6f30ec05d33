"""The ``bitbucket`` preset: recorded deliveries, every forgery, dedup, the ``.bitbucket`` projection."""

from __future__ import annotations

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

NAME = "bitbucket"
PACKAGE = "switchboard_bitbucket"
SECRET = "bb-TEST-switchboard-fixture-secret"  # the fixtures' documented test secret
OTHER = "bb-TEST-another-webhooks-secret"
AT = 1796040000  # any time at all: Bitbucket signs no timestamp
SIG = "X-Hub-Signature"


def push() -> tuple[dict[str, str], bytes]:
    return fixture(PACKAGE, "repo_push")


def _hexmac(key: str, body: bytes) -> str:
    return hmac.new(key.encode(), body, hashlib.sha256).hexdigest()


@pytest.mark.parametrize(
    ("name", "kind", "delivery_id"),
    [
        ("repo_push", "repo:push", "6f1d9b3e-2a4c-4e8f-b7d5-0c9a8e6f4d21"),
        ("pullrequest_created", "pullrequest:created", "a2e7c4f9-5b1d-4a3e-9c6f-8d0b2e4a6c13"),
    ],
)
async def test_the_recorded_deliveries_verify(
    preset_runtime: Runtime, name: str, kind: str, delivery_id: str
) -> None:
    headers, body = fixture(PACKAGE, name)
    verdict = verify(source(preset_runtime, NAME), headers, body, SECRET, AT)
    assert verdict.ok and verdict.verified, verdict.detail
    assert verdict.kind == kind
    assert verdict.delivery_id == delivery_id  # X-Request-UUID, not the hook's X-Hook-UUID


async def test_no_clock_applies(preset_runtime: Runtime) -> None:
    # Bitbucket signs no timestamp, so there is no stale or future delivery to refuse: a
    # recorded one verifies whenever it arrives, and a replay is absorbed by its delivery id
    # (see the end-to-end test), not by a clock.
    headers, body = push()
    for now in (0, AT, AT + 10 * 365 * 86400):
        assert verify(source(preset_runtime, NAME), headers, body, SECRET, now).ok


def _forged(headers: dict[str, str], body: bytes) -> list[tuple[str, dict[str, str], bytes, str]]:
    """Each forgery class: (what, headers, body, secret) and it must be refused.

    Timestamps do not apply (none is signed); nor do ids: only the body is signed.
    """
    good = headers[SIG]
    digest = good.removeprefix("sha256=")
    _, other_body = fixture(PACKAGE, "pullrequest_created")
    return [
        ("wrong secret", headers, body, OTHER),
        ("tampered body", headers, body.replace(b'"forced":false', b'"forced":true'), SECRET),
        ("body swapped for another signed one", headers, other_body, SECRET),
        (f"missing {SIG}", {k: v for k, v in headers.items() if k != SIG}, body, SECRET),
        ("empty signature", {**headers, SIG: ""}, body, SECRET),
        ("prefix only", {**headers, SIG: "sha256="}, body, SECRET),
        ("garbage signature", {**headers, SIG: "sha256=zzzz-not-hex"}, body, SECRET),
        ("truncated signature", {**headers, SIG: good[:-2]}, body, SECRET),
        (
            "upper-case hex (Bitbucket sends lower case)",
            {**headers, SIG: "sha256=" + digest.upper()},
            body,
            SECRET,
        ),
        ("no prefix", {**headers, SIG: digest}, body, SECRET),
        ("wrong prefix (sha1=)", {**headers, SIG: "sha1=" + digest}, body, SECRET),
        ("wrong prefix (sha512=)", {**headers, SIG: "sha512=" + digest}, body, SECRET),
        (
            "signed with another key",
            {**headers, SIG: "sha256=" + _hexmac(OTHER, body)},
            body,
            SECRET,
        ),
    ]


@pytest.mark.parametrize("case", range(13))
async def test_every_forgery_is_refused(preset_runtime: Runtime, case: int) -> None:
    headers, body = push()
    what, h, b, secret = _forged(headers, body)[case]
    verdict = verify(source(preset_runtime, NAME), h, b, secret, AT)
    assert not verdict.ok, what
    assert verdict.detail, what
    assert verdict.reason in REASONS and verdict.reason != "other", (what, verdict.reason)
    assert SECRET not in verdict.detail and headers[SIG] not in verdict.detail


async def test_a_second_signature_cannot_be_sent(preset_runtime: Runtime) -> None:
    # Bitbucket sends exactly one sha256= value. Two values joined by a comma (what a proxy
    # makes of a repeated header) are one wrong value, even when one of them is right; of
    # two header lines only the first counts.
    src = source(preset_runtime, NAME)
    headers, body = push()
    good = headers[SIG]
    for joined in (f"{good}, {good}", f"sha256={'0' * 64}, {good}", f"{good},sha256=00"):
        verdict = verify(src, {**headers, SIG: joined}, body, SECRET, AT)
        assert not verdict.ok and verdict.detail == "signature mismatch", joined
    lines = [(k, v) for k, v in headers.items() if k != SIG] + [(SIG, "sha256=00"), (SIG, good)]
    assert not src.verify(Delivery(Headers(lines), body), SECRET.encode(), AT).ok


async def test_without_a_request_uuid_the_body_is_the_key(preset_runtime: Runtime) -> None:
    headers, body = push()
    cut = {k: v for k, v in headers.items() if k != "X-Request-UUID"}
    assert (
        verify(source(preset_runtime, NAME), cut, body, SECRET, AT).delivery_id
        == "sha256:" + hashlib.sha256(body).hexdigest()
    )  # never the webhook's X-Hook-UUID


async def test_end_to_end_with_the_producers_own_secret_and_dedup(
    preset_runtime: Runtime,
) -> None:
    rt = preset_runtime
    created = await create(rt, NAME, SECRET)
    assert "signing_secret" not in created and created["signing_secret_imported"] is True
    body = json.dumps(
        {
            "repository": {"full_name": "northwind/widgets"},
            "actor": {"display_name": "Ada Lovelace", "nickname": "ada"},
            "push": {
                "changes": [
                    {
                        "new": {"type": "branch", "name": "main", "target": {"hash": "abc123"}},
                        "closed": False,
                        "forced": False,
                    }
                ]
            },
        }
    ).encode()
    headers: dict[str, Any] = source(rt, NAME).sign(
        body, SECRET.encode(), "repo:push", delivery_id="req-one", now=time.time()
    )
    assert headers["X-Request-UUID"] == "req-one" and headers["X-Event-Key"] == "repo:push"
    assert headers[SIG] == "sha256=" + _hexmac(SECRET, body)  # what Bitbucket would send
    first = await post(rt, token_of(created), headers, body)
    assert first.status == 202, first.body
    assert [t["created"] for t in first.body["todos"]] == [True]
    again = await post(rt, token_of(created), headers, body)  # Bitbucket retries (5xx)
    assert again.status == 202
    assert [t["created"] for t in again.body["todos"]] == [False]  # one event, by request id
    row = await rt.store.db.fetchone(
        "SELECT kind, external_id FROM events WHERE webhook_id = %s", (created["webhook_id"],)
    )
    assert row is not None and row["kind"] == "repo:push"
    assert str(row["external_id"]).endswith(":req-one")
    forged = {**headers, SIG: "sha256=" + _hexmac(OTHER, body)}
    assert (await post(rt, token_of(created), forged, body)).status == 401
    wrong_prefix = {**headers, SIG: headers[SIG].replace("sha256=", "sha1=")}
    assert (await post(rt, token_of(created), wrong_prefix, body)).status == 401


# --------------------------------------------------------------------------------------
# .bitbucket
# --------------------------------------------------------------------------------------


def _build(kind: str | None, payload: Any) -> dict[str, Any] | None:
    built: dict[str, Any] | None = import_module(PACKAGE).build_bitbucket(NAME, kind, payload)
    return built


def test_the_projection_of_a_push(preset_site: Any) -> None:
    _, body = push()
    built = _build("repo:push", json.loads(body))
    assert built == {
        "event_key": "repo:push",
        "repository": "northwind/widgets",
        "workspace": "northwind",
        "actor": "Ada Lovelace",
        "actor_nickname": "ada",
        "actor_account_id": "712020:3f9c1b52-8d47-4e0a-a6b3-5e2d1c0f9a87",
        "branch": "main",
        "branches": ["main"],
        "tag": None,
        "commit": "9f8e7d6c5b4a39281706f5e4d3c2b1a0f9e8d7c6",
        "deleted": False,
        "forced": False,
        "pullrequest_id": None,
        "pullrequest_title": None,
        "pullrequest_state": None,
        "destination_branch": None,
        "title": None,
        "url": "https://bitbucket.org/northwind/widgets/branches/compare/"
        "9f8e7d6c5b4a39281706f5e4d3c2b1a0f9e8d7c6..4d1c3b2a0f9e8d7c6b5a49382716f5e4d3c2b1a0",
    }
    assert set(built) == set(import_module(PACKAGE).BITBUCKET_KEYS)


def test_the_projection_of_a_pull_request(preset_site: Any) -> None:
    _, body = fixture(PACKAGE, "pullrequest_created")
    built = _build("pullrequest:created", json.loads(body))
    assert built is not None
    assert {k: v for k, v in built.items() if v is not None} == {
        "event_key": "pullrequest:created",
        "repository": "northwind/widgets",
        "workspace": "northwind",
        "actor": "Ada Lovelace",
        "actor_nickname": "ada",
        "actor_account_id": "712020:3f9c1b52-8d47-4e0a-a6b3-5e2d1c0f9a87",
        "branch": "feature/partial-refunds",
        "commit": "b3a2918f7e6d",
        "pullrequest_id": 57,
        "pullrequest_title": "Refund partial shipments",
        "pullrequest_state": "OPEN",
        "destination_branch": "main",
        "title": "Refund partial shipments",
        "url": "https://bitbucket.org/northwind/widgets/pull-requests/57",
    }


def test_the_projection_of_other_pushes(preset_site: Any) -> None:
    tagged = {
        "new": {"type": "tag", "name": "v2.0.0", "target": {"hash": "f00"}},
        "old": None,
        "closed": False,
        "forced": False,
    }
    deleted_then_tag = {
        "repository": {
            "full_name": "acme/api",
            "links": {"html": {"href": "https://bitbucket.org/acme/api"}},
        },
        "push": {
            "changes": [
                {
                    "new": None,
                    "old": {"type": "branch", "name": "old-feature"},
                    "closed": True,
                    "forced": False,
                },
                tagged,
                {"new": {"type": "branch", "name": "main"}, "closed": False, "forced": True},
            ]
        },
    }
    built = _build("repo:push", deleted_then_tag)
    assert built is not None
    assert built["branch"] == "old-feature" and built["deleted"] is True
    assert built["commit"] is None and built["tag"] is None
    assert built["branches"] == ["old-feature", "main"]
    assert built["workspace"] == "acme"  # from full_name when no workspace is sent
    assert built["url"] == "https://bitbucket.org/acme/api"  # the repository's page
    tag = _build("repo:push", {"push": {"changes": [tagged]}})
    assert tag is not None and tag["tag"] == "v2.0.0" and tag["branch"] is None
    assert tag["branches"] == [] and tag["commit"] == "f00"


def test_the_projection_never_trusts_types(preset_site: Any) -> None:
    assert _build("repo:push", [1]) is None and _build("repo:push", None) is None
    odd = _build(
        None,
        {
            "repository": "northwind/widgets",
            "actor": ["ada"],
            "push": {"changes": 5},
            "pullrequest": {"id": True, "title": 3, "source": "main"},
        },
    )
    assert odd is not None
    assert all(odd[k] is None for k in odd if k != "branches"), odd
    assert odd["branches"] == []
    unhashable = _build(
        "repo:push", {"push": {"changes": [{"new": {"type": ["branch"], "name": "main"}}]}}
    )
    assert unhashable is not None and unhashable["branch"] is None
    assert unhashable["branches"] == []
    issue = _build(
        "issue:created",
        {
            "issue": {
                "title": "Crash on refund",
                "links": {"html": {"href": "https://bitbucket.org/acme/api/issues/9"}},
            }
        },
    )
    assert issue is not None and issue["title"] == "Crash on refund"
    assert issue["url"] == "https://bitbucket.org/acme/api/issues/9"


async def test_the_projection_end_to_end(preset_runtime: Runtime) -> None:
    # The recorded delivery itself, through ingest: the todo carries .bitbucket and its title.
    rt = preset_runtime
    created = await create(rt, NAME, SECRET)
    headers, body = fixture(PACKAGE, "pullrequest_created")
    reply = await post(rt, token_of(created), headers, body)
    assert reply.status == 202, reply.body
    [todo] = reply.body["todos"]
    row = await rt.store.db.fetchone(
        "SELECT title, payload FROM todos WHERE id = %s", (todo["id"],)
    )
    assert row is not None and row["title"] == "Refund partial shipments"
    bb = row["payload"]["bitbucket"]
    assert bb["pullrequest_id"] == 57 and bb["destination_branch"] == "main"
    assert bb["actor"] == "Ada Lovelace" and bb["repository"] == "northwind/widgets"
    assert row["payload"]["kind"] == "pullrequest:created"
    event = await rt.store.db.fetchone(
        "SELECT external_id, headers FROM events WHERE webhook_id = %s", (created["webhook_id"],)
    )
    assert event is not None
    assert str(event["external_id"]).endswith(":a2e7c4f9-5b1d-4a3e-9c6f-8d0b2e4a6c13")
    stored = {k.lower(): v for k, v in dict(event["headers"]).items()}
    assert stored[SIG.lower()] != headers[SIG]  # the signature is never stored
    assert stored["x-event-key"] == "pullrequest:created"  # kept for rules
