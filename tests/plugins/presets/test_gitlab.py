"""The ``gitlab`` preset: recorded deliveries, every forgery, dedup, the ``.gitlab`` projection."""

from __future__ import annotations

import hashlib
import json
import time
from importlib import import_module
from typing import Any

import pytest
from sbpresets import create, fixture, post, source, token_of, verify

from switchboard.plugin import REASONS
from switchboard.runtime import Runtime
from switchboard.sources import Delivery, Headers

NAME = "gitlab"
PACKAGE = "switchboard_gitlab"
TOKEN = "glwh-TEST-switchboard-fixture-token"  # the fixtures' documented test token
OTHER = "glwh-TEST-another-webhooks-token"
AT = 1796040000  # any time at all: GitLab sends no timestamp
TOK = "X-Gitlab-Token"


def push() -> tuple[dict[str, str], bytes]:
    return fixture(PACKAGE, "push_hook")


@pytest.mark.parametrize(
    ("name", "kind", "delivery_id"),
    [
        # GitLab 17.4+: Idempotency-Key
        ("push_hook", "Push Hook", "f4a6c8e0-2b4d-4f68-8a0c-1e3b5d7f9a2c"),
        # GitLab before 17.4: no Idempotency-Key, so X-Gitlab-Event-UUID
        ("merge_request_hook", "Merge Request Hook", "0d7b3f95-6a1c-4e82-b4d9-3f5a7c9e1b26"),
    ],
)
async def test_the_recorded_deliveries_verify(
    preset_runtime: Runtime, name: str, kind: str, delivery_id: str
) -> None:
    headers, body = fixture(PACKAGE, name)
    verdict = verify(source(preset_runtime, NAME), headers, body, TOKEN, AT)
    assert verdict.ok and verdict.verified, verdict.detail
    assert verdict.kind == kind
    assert verdict.delivery_id == delivery_id


async def test_no_clock_applies(preset_runtime: Runtime) -> None:
    # GitLab sends no timestamp at all, so there is no stale or future delivery to refuse:
    # a recorded one verifies whenever it arrives, and a replay is absorbed by its delivery
    # id (see the end-to-end test), not by a clock.
    headers, body = push()
    for now in (0, AT, AT + 10 * 365 * 86400):
        assert verify(source(preset_runtime, NAME), headers, body, TOKEN, now).ok


def _forged(headers: dict[str, str]) -> list[tuple[str, dict[str, str], str]]:
    """Each forgery class that applies to a token: (what, headers, secret); all refused.

    Timestamps do not apply (none is sent), nor does a tampered body: see
    :func:`test_the_token_does_not_cover_the_body`.
    """
    return [
        ("wrong secret", headers, OTHER),
        (f"missing {TOK}", {k: v for k, v in headers.items() if k != TOK}, TOKEN),
        ("empty token", {**headers, TOK: ""}, TOKEN),
        ("another webhook's token", {**headers, TOK: OTHER}, TOKEN),
        ("truncated token", {**headers, TOK: TOKEN[:-1]}, TOKEN),
        ("token with a suffix", {**headers, TOK: TOKEN + "x"}, TOKEN),
        ("token in another case", {**headers, TOK: TOKEN.upper()}, TOKEN),
        ("token as a bearer credential", {**headers, TOK: f"Bearer {TOKEN}"}, TOKEN),
        (
            "a digest of the token instead",
            {**headers, TOK: "sha256=" + hashlib.sha256(TOKEN.encode()).hexdigest()},
            TOKEN,
        ),
    ]


@pytest.mark.parametrize("case", range(9))
async def test_every_forgery_is_refused(preset_runtime: Runtime, case: int) -> None:
    headers, body = push()
    what, h, secret = _forged(headers)[case]
    verdict = verify(source(preset_runtime, NAME), h, body, secret, AT)
    assert not verdict.ok, what
    assert verdict.detail, what
    assert verdict.reason in REASONS and verdict.reason != "other", (what, verdict.reason)
    assert TOKEN not in verdict.detail and OTHER not in verdict.detail


async def test_the_token_does_not_cover_the_body(preset_runtime: Runtime) -> None:
    # GitLab's scheme authenticates the sender, not the content: whoever holds the token can
    # send any body. Nothing here can detect a changed body (TLS must protect it); this test
    # pins that limit down so nobody mistakes the token for a signature.
    headers, body = push()
    tampered = body.replace(b'"ref":"refs/heads/main"', b'"ref":"refs/heads/evil"')
    assert tampered != body
    assert verify(source(preset_runtime, NAME), headers, tampered, TOKEN, AT).ok


async def test_a_second_token_cannot_be_sent(preset_runtime: Runtime) -> None:
    # GitLab sends the one token. Two values joined by a comma (what a proxy makes of a
    # repeated header) are one wrong value, even when one of them is right; of two header
    # lines only the first counts. Surrounding whitespace is not part of a header's value.
    src = source(preset_runtime, NAME)
    headers, body = push()
    for joined in (f"{TOKEN}, {TOKEN}", f"{OTHER}, {TOKEN}", f"{TOKEN},{OTHER}"):
        verdict = verify(src, {**headers, TOK: joined}, body, TOKEN, AT)
        assert not verdict.ok and verdict.detail == f"{TOK} does not match the secret"
    lines = [(k, v) for k, v in headers.items() if k != TOK] + [(TOK, OTHER), (TOK, TOKEN)]
    assert not src.verify(Delivery(Headers(lines), body), TOKEN.encode(), AT).ok
    assert verify(src, {**headers, TOK: f" {TOKEN}\t"}, body, TOKEN, AT).ok


async def test_the_delivery_id_falls_back_to_the_event_uuid(preset_runtime: Runtime) -> None:
    src = source(preset_runtime, NAME)
    headers, body = push()
    older = {k: v for k, v in headers.items() if k != "Idempotency-Key"}
    assert verify(src, older, body, TOKEN, AT).delivery_id == "5e0c8a2f-1d4b-4c7e-a39f-6b8d0e2c4a17"
    neither = {k: v for k, v in older.items() if k != "X-Gitlab-Event-UUID"}
    # never X-Gitlab-Webhook-UUID: without a delivery id the body is the key
    assert (
        verify(src, neither, body, TOKEN, AT).delivery_id
        == "sha256:" + hashlib.sha256(body).hexdigest()
    )


async def test_end_to_end_with_the_producers_own_token_and_dedup(
    preset_runtime: Runtime,
) -> None:
    rt = preset_runtime
    created = await create(rt, NAME, TOKEN)
    assert "signing_secret" not in created and created["signing_secret_imported"] is True
    body = json.dumps(
        {
            "object_kind": "push",
            "ref": "refs/heads/main",
            "user_username": "ghopper",
            "checkout_sha": "abc123",
            "project": {"path_with_namespace": "northwind/widgets"},
        }
    ).encode()
    headers: dict[str, Any] = source(rt, NAME).sign(
        body, TOKEN.encode(), "Push Hook", delivery_id="idem-one", now=time.time()
    )
    assert headers == {
        "Content-Type": "application/json",
        "Idempotency-Key": "idem-one",
        "X-Gitlab-Event": "Push Hook",
        TOK: TOKEN,
    }  # what GitLab sends
    first = await post(rt, token_of(created), headers, body)
    assert first.status == 202, first.body
    assert [t["created"] for t in first.body["todos"]] == [True]
    again = await post(rt, token_of(created), headers, body)  # resent from the hook's log
    assert again.status == 202
    assert [t["created"] for t in again.body["todos"]] == [False]  # one event, by the key
    row = await rt.store.db.fetchone(
        "SELECT kind, external_id, headers, raw_headers FROM events WHERE webhook_id = %s",
        (created["webhook_id"],),
    )
    assert row is not None and row["kind"] == "Push Hook"
    assert str(row["external_id"]).endswith(":idem-one")
    # The token is the secret itself: it is never stored, parsed or raw.
    assert TOKEN not in json.dumps(row["headers"])
    assert TOKEN.encode() not in bytes(row["raw_headers"])
    forged = {**headers, TOK: OTHER}
    assert (await post(rt, token_of(created), forged, body)).status == 401
    missing = {k: v for k, v in headers.items() if k != TOK}
    assert (await post(rt, token_of(created), missing, body)).status == 401


# --------------------------------------------------------------------------------------
# .gitlab
# --------------------------------------------------------------------------------------


def _build(kind: str | None, payload: Any) -> dict[str, Any] | None:
    built: dict[str, Any] | None = import_module(PACKAGE).build_gitlab(NAME, kind, payload)
    return built


def test_the_projection_of_a_push(preset_site: Any) -> None:
    _, body = push()
    built = _build("Push Hook", json.loads(body))
    assert built == {
        "object_kind": "push",
        "project": "northwind/widgets",
        "project_id": 1482,
        "ref": "refs/heads/main",
        "branch": "main",
        "tag": None,
        "target_branch": None,
        "commit": "c0ffee5e1a2b3c4d5e6f708192a3b4c5d6e7f809",
        "deleted": False,
        "user": "ghopper",
        "iid": None,
        "title": None,
        "action": None,
        "state": None,
        "draft": None,
        "labels": None,
        "url": "https://gitlab.example.com/northwind/widgets",
    }
    assert set(built) == set(import_module(PACKAGE).GITLAB_KEYS)


def test_the_projection_of_a_merge_request(preset_site: Any) -> None:
    _, body = fixture(PACKAGE, "merge_request_hook")
    built = _build("Merge Request Hook", json.loads(body))
    assert built == {
        "object_kind": "merge_request",
        "project": "northwind/widgets",
        "project_id": 1482,
        "ref": None,
        "branch": "feature/partial-refunds",
        "tag": None,
        "target_branch": "main",
        "commit": "b3a2918f7e6d5c4b3a2918f7e6d5c4b3a2918f7e",
        "deleted": None,
        "user": "ghopper",
        "iid": 57,
        "title": "Refund partial shipments",
        "action": "open",
        "state": "opened",
        "draft": False,
        "labels": ["needs-review"],
        "url": "https://gitlab.example.com/northwind/widgets/-/merge_requests/57",
    }


def test_the_projection_of_other_hooks(preset_site: Any) -> None:
    tag = _build(
        "Tag Push Hook",
        {
            "object_kind": "tag_push",
            "ref": "refs/tags/v2.0.0",
            "after": "f00",
            "checkout_sha": "f00",
            "user_username": "ghopper",
        },
    )
    assert tag is not None and tag["tag"] == "v2.0.0" and tag["branch"] is None
    deleted = _build(
        "Push Hook",
        {"object_kind": "push", "ref": "refs/heads/old", "after": "0" * 40, "checkout_sha": None},
    )
    assert deleted is not None and deleted["deleted"] is True and deleted["commit"] is None
    issue = _build(
        "Issue Hook",
        {
            "object_kind": "issue",
            "user": {"username": "ada"},
            "project": {"id": 7, "path_with_namespace": "acme/api"},
            "object_attributes": {
                "iid": 12,
                "title": "Crash on refund",
                "action": "open",
                "state": "opened",
                "url": "https://g/acme/api/-/issues/12",
            },
            "labels": [{"title": "bug"}, {"title": 3}],
        },
    )
    assert issue is not None
    assert (issue["iid"], issue["title"], issue["user"], issue["labels"], issue["branch"]) == (
        12,
        "Crash on refund",
        "ada",
        ["bug"],
        None,
    )
    note = _build(
        "Note Hook",
        {
            "object_kind": "note",
            "user": {"username": "ada"},
            "object_attributes": {"note": "LGTM", "url": "https://g/n/1"},
            "merge_request": {"iid": 57, "title": "Refund partial shipments"},
        },
    )
    assert note is not None and (note["iid"], note["title"]) == (57, "Refund partial shipments")
    assert note["url"] == "https://g/n/1"
    pipeline = _build(
        "Pipeline Hook",
        {
            "object_kind": "pipeline",
            "project_id": 9,
            "object_attributes": {"ref": "main", "tag": False, "status": "failed", "sha": "beef"},
        },
    )
    assert pipeline is not None
    assert (pipeline["branch"], pipeline["state"], pipeline["commit"], pipeline["project_id"]) == (
        "main",
        "failed",
        "beef",
        9,
    )
    job = _build(
        "Job Hook",
        {
            "object_kind": "build",
            "ref": "v1.0",
            "tag": True,
            "build_status": "success",
            "sha": "cafe",
        },
    )
    assert job is not None and job["tag"] == "v1.0" and job["state"] == "success"


def test_the_projection_never_trusts_types(preset_site: Any) -> None:
    assert _build("Push Hook", [1]) is None and _build("Push Hook", "x") is None
    odd = _build(
        None,
        {
            "object_kind": 1,
            "project": "northwind/widgets",
            "ref": 5,
            "user": "ghopper",
            "object_attributes": {"iid": True, "title": ["t"], "draft": "no"},
            "labels": "bug",
        },
    )
    assert odd is not None
    assert all(value is None for value in odd.values()), odd


async def test_the_projection_end_to_end(preset_runtime: Runtime) -> None:
    # The recorded delivery itself, through ingest: the todo carries .gitlab and its title.
    rt = preset_runtime
    created = await create(rt, NAME, TOKEN)
    headers, body = fixture(PACKAGE, "merge_request_hook")
    reply = await post(rt, token_of(created), headers, body)
    assert reply.status == 202, reply.body
    [todo] = reply.body["todos"]
    row = await rt.store.db.fetchone(
        "SELECT title, payload FROM todos WHERE id = %s", (todo["id"],)
    )
    assert row is not None and row["title"] == "Refund partial shipments"
    gl = row["payload"]["gitlab"]
    assert gl["iid"] == 57 and gl["action"] == "open" and gl["target_branch"] == "main"
    assert gl["user"] == "ghopper" and gl["project"] == "northwind/widgets"
    assert row["payload"]["kind"] == "Merge Request Hook"
    event = await rt.store.db.fetchone(
        "SELECT external_id FROM events WHERE webhook_id = %s", (created["webhook_id"],)
    )
    assert event is not None
    assert str(event["external_id"]).endswith(":0d7b3f95-6a1c-4e82-b4d9-3f5a7c9e1b26")
