"""The ``slack`` preset: Slack's own worked example, every forgery, dedup, ``.slack``."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from sbpresets import create, fixture, post, source, token_of, verify

from switchboard.plugin import REASONS
from switchboard.routing.envelope import parse_payload
from switchboard.runtime import Runtime

NAME = "slack"
PACKAGE = "switchboard_slack"
DOC_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"  # Slack's documented example secret
DOC_AT = 1531420618  # its X-Slack-Request-Timestamp
DOC_SIGNATURE = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
SECRET = "0123456789abcdef0123456789abcdef"  # the app_mention fixture's test secret
AT = 1764504000  # its X-Slack-Request-Timestamp
OTHER = "fedcba9876543210fedcba9876543210"


def docs_example() -> tuple[dict[str, str], bytes]:
    return fixture(PACKAGE, "docs_slash_command")


def app_mention() -> tuple[dict[str, str], bytes]:
    return fixture(PACKAGE, "app_mention")


async def test_slacks_own_worked_example_verifies(preset_runtime: Runtime) -> None:
    headers, body = docs_example()
    assert headers["x-slack-signature"] == DOC_SIGNATURE
    assert headers["x-slack-request-timestamp"] == str(DOC_AT)
    assert b"&command=%2Fwebhook-collect&" in body and not body.endswith(b"\n")
    verdict = verify(source(preset_runtime, NAME), headers, body, DOC_SECRET, DOC_AT)
    assert verdict.ok and verdict.verified, verdict.detail
    # a form-encoded body carries neither an event id nor a kind
    assert verdict.kind is None
    assert verdict.delivery_id is not None and verdict.delivery_id.startswith("sha256:")


async def test_the_preset_signs_the_worked_example_as_slack_did(preset_runtime: Runtime) -> None:
    _, body = docs_example()
    signed = source(preset_runtime, NAME).sign(body, DOC_SECRET.encode(), None, now=DOC_AT)
    assert signed["X-Slack-Signature"] == DOC_SIGNATURE
    assert signed["X-Slack-Request-Timestamp"] == str(DOC_AT)


async def test_the_events_api_fixture_verifies(preset_runtime: Runtime) -> None:
    headers, body = app_mention()
    verdict = verify(source(preset_runtime, NAME), headers, body, SECRET, AT)
    assert verdict.ok and verdict.verified, verdict.detail
    assert verdict.delivery_id == "Ev0835KQ7ZPR"
    assert verdict.kind == "app_mention"  # event.type before the envelope's type


def _forged(
    headers: dict[str, str], body: bytes, secret: str, at: int
) -> list[tuple[str, dict[str, str], bytes, str, float]]:
    """Each forgery class: (what, headers, body, secret, now) and it must be refused."""
    good = headers["x-slack-signature"]

    def with_sig(value: str) -> dict[str, str]:
        return {**headers, "x-slack-signature": value}

    return [
        ("wrong secret", headers, body, OTHER, at),
        ("stale timestamp", headers, body, secret, at + 301),
        ("future timestamp", headers, body, secret, at - 301),
        ("tampered body", headers, body[:-1] + bytes([body[-1] ^ 1]), secret, at),
        ("body with a trailing newline", headers, body + b"\n", secret, at),
        (
            "timestamp changed (it is signed)",
            {**headers, "x-slack-request-timestamp": str(at + 1)},
            body,
            secret,
            at,
        ),
        (
            "missing X-Slack-Signature",
            {k: v for k, v in headers.items() if k != "x-slack-signature"},
            body,
            secret,
            at,
        ),
        (
            "missing X-Slack-Request-Timestamp",
            {k: v for k, v in headers.items() if k != "x-slack-request-timestamp"},
            body,
            secret,
            at,
        ),
        (
            "timestamp not a number",
            {**headers, "x-slack-request-timestamp": "1531420618.5"},
            body,
            secret,
            at,
        ),
        ("a wrong v0", with_sig("v0=" + "0" * 64), body, secret, at),
        ("wrong version prefix", with_sig(good.replace("v0=", "v1=")), body, secret, at),
        ("bare hex, no v0=", with_sig(good.removeprefix("v0=")), body, secret, at),
        ("garbage header", with_sig("garbage"), body, secret, at),
        ("empty header", with_sig(""), body, secret, at),
    ]


FORGERIES = 14  # len(_forged(...)); the fixtures load only once the preset is installed


async def test_every_forgery_class_is_listed(preset_runtime: Runtime) -> None:
    assert len(_forged(*docs_example(), DOC_SECRET, DOC_AT)) == FORGERIES


@pytest.mark.parametrize("fixture_name", ["docs_slash_command", "app_mention"])
@pytest.mark.parametrize("case", range(FORGERIES))
async def test_every_forgery_is_refused(
    preset_runtime: Runtime, case: int, fixture_name: str
) -> None:
    headers, body = fixture(PACKAGE, fixture_name)
    secret, at = (DOC_SECRET, DOC_AT) if fixture_name == "docs_slash_command" else (SECRET, AT)
    assert verify(source(preset_runtime, NAME), headers, body, secret, at).ok
    what, h, b, key, now = _forged(headers, body, secret, at)[case]
    verdict = verify(source(preset_runtime, NAME), h, b, key, now)
    assert not verdict.ok, what
    assert verdict.detail, what
    assert verdict.reason in REASONS and verdict.reason != "other", (what, verdict.reason)
    assert secret not in verdict.detail and headers["x-slack-signature"] not in verdict.detail


async def test_the_refusals_say_what_was_wrong(preset_runtime: Runtime) -> None:
    headers, body = docs_example()
    src = source(preset_runtime, NAME)
    assert "stale" in str(verify(src, headers, body, DOC_SECRET, DOC_AT + 301).detail)
    assert "future" in str(verify(src, headers, body, DOC_SECRET, DOC_AT - 301).detail)
    assert "mismatch" in str(verify(src, headers, body, OTHER, DOC_AT).detail)
    cut = {k: v for k, v in headers.items() if k != "x-slack-signature"}
    assert "missing X-Slack-Signature" in str(verify(src, cut, body, DOC_SECRET, DOC_AT).detail)
    assert verify(src, headers, body, DOC_SECRET, DOC_AT + 300).ok  # five minutes, inclusive
    assert verify(src, headers, body, DOC_SECRET, DOC_AT - 300).ok


async def test_one_signature_only_a_wrong_v0_is_refused(preset_runtime: Runtime) -> None:
    """Slack sends exactly one v0: the header is one signature, never a list to pick from."""
    headers, body = docs_example()
    src = source(preset_runtime, NAME)
    bad = "v0=" + "ab" * 32
    for value in (
        bad,
        f"{bad},{DOC_SIGNATURE}",
        f"{bad} {DOC_SIGNATURE}",
        f"{DOC_SIGNATURE},{bad}",
    ):
        verdict = verify(src, {**headers, "x-slack-signature": value}, body, DOC_SECRET, DOC_AT)
        assert not verdict.ok and verdict.detail, value
    assert verify(
        src, {**headers, "x-slack-signature": f" {DOC_SIGNATURE} "}, body, DOC_SECRET, DOC_AT
    ).ok  # surrounding whitespace is no second signature


async def test_the_projection_of_the_events_api_fixture(preset_runtime: Runtime) -> None:
    projection = preset_runtime.registries.projections.get("slack:slack")
    assert projection is not None and projection.actor_key == "user"
    _, body = app_mention()
    assert projection.build(NAME, "app_mention", json.loads(body)) == {
        "type": "event_callback",
        "event_id": "Ev0835KQ7ZPR",
        "event_time": 1764503999,
        "team_id": "T04RS8KJ7QW",
        "enterprise_id": None,
        "api_app_id": "A07N3PZ9K2M",
        "event_type": "app_mention",
        "event_subtype": None,
        "channel": "C05D1L8TQ4N",
        "channel_type": None,
        "user": "U04RS9F2XKL",
        "bot_id": None,
        "text": "<@U07N3Q1BB8R> the deploy of billing-api is stuck, can you look?",
        "ts": "1764503999.123459",
        "thread_ts": None,
    }


async def test_the_projection_reads_ids_sent_as_objects(preset_runtime: Runtime) -> None:
    projection = preset_runtime.registries.projections.get("slack:slack")
    assert projection is not None
    created = {
        "type": "event_callback",
        "event_id": "Ev2",
        "event": {
            "type": "channel_created",
            "channel": {"id": "C024BE91L", "name": "fun", "creator": "U024BE7LH"},
        },
    }
    got = projection.build(NAME, "channel_created", created)
    assert got is not None and got["channel"] == "C024BE91L" and got["user"] is None
    joined = {"type": "event_callback", "event": {"type": "team_join", "user": {"id": "U9"}}}
    got = projection.build(NAME, "team_join", joined)
    assert got is not None and got["user"] == "U9"
    reaction = {
        "type": "event_callback",
        "event": {
            "type": "reaction_added",
            "user": "U1",
            "reaction": "eyes",
            "item": {"type": "message", "channel": "C7", "ts": "1.2"},
        },
    }
    got = projection.build(NAME, "reaction_added", reaction)
    assert got is not None and got["channel"] == "C7"
    challenge = {"token": "t", "challenge": "c", "type": "url_verification"}
    got = projection.build(NAME, "url_verification", challenge)
    assert got is not None and got["type"] == "url_verification" and got["event_type"] is None


async def test_the_projection_is_null_for_a_form_encoded_body(preset_runtime: Runtime) -> None:
    """A slash command's body is no JSON: the envelope's payload is None, so is ``.slack``."""
    projection = preset_runtime.registries.projections.get("slack:slack")
    assert projection is not None
    _, body = docs_example()
    assert parse_payload(body) is None
    assert projection.build(NAME, None, parse_payload(body)) is None
    for payload in ([], "x", 3):
        assert projection.build(NAME, None, payload) is None


async def test_end_to_end_with_the_producers_own_secret_and_dedup(
    preset_runtime: Runtime,
) -> None:
    rt = preset_runtime
    created = await create(rt, NAME, SECRET)
    assert "signing_secret" not in created and created["signing_secret_imported"] is True
    _, recorded_body = app_mention()
    doc = json.loads(recorded_body)
    doc["event_id"] = "Ev0END2END01"
    body = json.dumps(doc, separators=(",", ":")).encode()
    headers: dict[str, Any] = source(rt, NAME).sign(body, SECRET.encode(), None, now=time.time())
    first = await post(rt, token_of(created), headers, body)
    assert first.status == 202, first.body
    assert [t["created"] for t in first.body["todos"]] == [True]
    retry = {**headers, "X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"}
    again = await post(rt, token_of(created), retry, body)  # Slack retries the event
    assert again.status == 202
    assert [t["created"] for t in again.body["todos"]] == [False]  # one event, by event_id
    row = await rt.store.db.fetchone(
        "SELECT kind, external_id FROM events WHERE webhook_id = %s", (created["webhook_id"],)
    )
    assert row is not None and row["kind"] == "app_mention"
    assert str(row["external_id"]).endswith(":Ev0END2END01")
    todo = await rt.store.db.fetchone(
        "SELECT title, payload FROM todos WHERE id = %s", (first.body["todos"][0]["id"],)
    )
    assert todo is not None and todo["title"] == "slack app_mention"
    slack = todo["payload"]["slack"]
    assert (slack["event_id"], slack["event_type"], slack["channel"], slack["user"]) == (
        "Ev0END2END01",
        "app_mention",
        "C05D1L8TQ4N",
        "U04RS9F2XKL",
    )
    forged = {**headers, "X-Slack-Signature": "v0=" + "0" * 64}
    assert (await post(rt, token_of(created), forged, body)).status == 401
    wrong_key = source(rt, NAME).sign(body, OTHER.encode(), None, now=time.time())
    assert (await post(rt, token_of(created), wrong_key, body)).status == 401


async def test_a_slash_command_end_to_end(preset_runtime: Runtime) -> None:
    """A form-encoded body: no kind, no ``.slack``, deduplicated by the body's hash."""
    rt = preset_runtime
    created = await create(rt, NAME, SECRET)
    _, body = docs_example()
    headers = source(rt, NAME).sign(body, SECRET.encode(), None, now=time.time())
    headers["Content-Type"] = "application/x-www-form-urlencoded"
    first = await post(rt, token_of(created), headers, body)
    assert first.status == 202, first.body
    assert [t["created"] for t in first.body["todos"]] == [True]
    again = await post(rt, token_of(created), headers, body)
    assert [t["created"] for t in again.body["todos"]] == [False]
    row = await rt.store.db.fetchone(
        "SELECT kind, content_type FROM events WHERE webhook_id = %s", (created["webhook_id"],)
    )
    assert row is not None and row["kind"] is None
    assert row["content_type"] == "application/x-www-form-urlencoded"
    todo = await rt.store.db.fetchone(
        "SELECT title, payload FROM todos WHERE id = %s", (first.body["todos"][0]["id"],)
    )
    assert todo is not None and todo["title"] == "slack delivery"
    assert todo["payload"]["payload"] is None and todo["payload"]["slack"] is None


async def test_the_url_verification_handshake_is_answered_and_nothing_stored(
    preset_runtime: Runtime,
) -> None:
    rt = preset_runtime
    created = await create(rt, NAME, SECRET)
    body = json.dumps(
        {
            "token": "Jhj5dZrVaK7ZwHHjRyZWjbDl",
            "type": "url_verification",
            "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P",
        }
    ).encode()
    headers: dict[str, Any] = source(rt, NAME).sign(body, SECRET.encode(), None, now=time.time())
    reply = await post(rt, token_of(created), headers, body)
    assert reply.status == 200
    assert reply.body == {"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}
    stored = await rt.store.db.fetchone(
        "SELECT count(*) AS n FROM events WHERE webhook_id = %s", (created["webhook_id"],)
    )
    assert stored is not None and stored["n"] == 0
    # the challenge is echoed only to Slack: a forged handshake is refused like any delivery
    forged = {**headers, "X-Slack-Signature": "v0=" + "0" * 64}
    assert (await post(rt, token_of(created), forged, body)).status == 401
