"""The cairn source's truth table: signature first, then the signed body's id and clock."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sbtest import make_env
from switchboard_cairn.source import CairnSource, parse_rfc3339

from switchboard.config import load_config
from switchboard.errors import ConfigError
from switchboard.runtime import Runtime
from switchboard.service import identity, webhooks
from switchboard.service.ingest import ingest
from switchboard.sources import Delivery, Headers, body_key, hmac_sha256_hex, long_id_key

SECRET = b"a-cairn-subscription-secret-of-32-chars+"
CREATED = "2026-09-11T17:04:05Z"
NOW = datetime.fromisoformat("2026-09-11T17:04:05+00:00").timestamp()
EVENT_ID = "6f1c1f0e-7f5b-4b8e-9a51-3f7f2c1d9b20"
SIG = "X-Cairn-Signature"
EID = "X-Cairn-Event-Id"


def event(**changes: Any) -> bytes:
    """A Cairn event body; a change to None removes that key."""
    doc: dict[str, Any] = {
        "source": "cairn",
        "kind": "artifact.created",
        "event_id": EVENT_ID,
        "created_at": CREATED,
        "data": {"id": "a1", "title": "handoff"},
    }
    doc.update(changes)
    return json.dumps({k: v for k, v in doc.items() if v is not None}).encode()


def signed(body: bytes, **overrides: str | None) -> Delivery:
    """``body`` with the headers Cairn sends, ``overrides`` replacing (None: removing) some."""
    headers: dict[str, str] = CairnSource().sign(body, SECRET, None)
    for name, value in overrides.items():
        headers.pop(name, None)
        if value is not None:
            headers[name] = value
    return Delivery(Headers(headers), body)


CASES: list[tuple[str, bytes, dict[str, str | None], bytes | None, float, bool, str]] = [
    # (id, body, header overrides, secret, now, ok, detail fragment)
    ("right secret", event(), {}, SECRET, NOW, True, ""),
    ("wrong secret", event(), {}, b"another-secret-entirely-xxxxxxxxx", NOW, False, "match"),
    ("no secret", event(), {}, None, NOW, False, "secret"),
    ("empty secret", event(), {}, b"", NOW, False, "secret"),
    ("missing signature header", event(), {SIG: None}, SECRET, NOW, False, f"missing {SIG}"),
    ("empty signature header", event(), {SIG: ""}, SECRET, NOW, False, "missing"),
    (
        "bare hex is not cairn's format",
        event(),
        {SIG: hmac_sha256_hex(SECRET, event())},
        SECRET,
        NOW,
        False,
        "match",
    ),
    ("stale by 301 s", event(), {}, SECRET, NOW + 301, False, "old"),
    ("future by 301 s", event(), {}, SECRET, NOW - 301, False, "future"),
    ("300 s old is inside", event(), {}, SECRET, NOW + 300, True, ""),
    ("300 s ahead is inside", event(), {}, SECRET, NOW - 300, True, ""),
    ("mismatched event id header", event(), {EID: "0000"}, SECRET, NOW, False, EID),
    ("empty event id header is present", event(), {EID: ""}, SECRET, NOW, False, EID),
    ("no event id header", event(), {EID: None}, SECRET, NOW, True, ""),
    ("body without event_id", event(event_id=None), {}, SECRET, NOW, False, "event_id"),
    ("body with empty event_id", event(event_id=""), {}, SECRET, NOW, False, "event_id"),
    ("body with numeric event_id", event(event_id=7), {}, SECRET, NOW, False, "event_id"),
    ("body without created_at", event(created_at=None), {}, SECRET, NOW, False, "created_at"),
    (
        "created_at without offset",
        event(created_at="2026-09-11T17:04:05"),
        {},
        SECRET,
        NOW,
        False,
        "RFC 3339",
    ),
    ("created_at date only", event(created_at="2026-09-11"), {}, SECRET, NOW, False, "RFC 3339"),
    (
        "created_at with offset and nanoseconds",
        event(created_at="2026-09-11T19:04:05.123456789+02:00"),
        {},
        SECRET,
        NOW,
        True,
        "",
    ),
    ("signed body that is not JSON", b"not json", {}, SECRET, NOW, False, "JSON object"),
    ("signed JSON array", b"[1, 2]", {}, SECRET, NOW, False, "JSON object"),
]


@pytest.mark.parametrize(
    "body,overrides,secret,now,ok,fragment", [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_verify_truth_table(
    body: bytes,
    overrides: dict[str, str | None],
    secret: bytes | None,
    now: float,
    ok: bool,
    fragment: str,
) -> None:
    result = CairnSource().verify(signed(body, **overrides), secret, now)
    assert result.ok is ok, result.detail
    assert result.verified is ok
    assert fragment in result.detail
    if not ok:
        # A refusal never echoes the secret or the MAC the receiver expected.
        assert hmac_sha256_hex(secret or b"", body) not in result.detail
        assert hmac_sha256_hex(SECRET, body) not in result.detail
        assert SECRET.decode() not in result.detail
        assert result.delivery_id is None


def test_tampered_body_is_refused() -> None:
    headers = CairnSource().sign(event(), SECRET, None)
    tampered = event().replace(b"handoff", b"handoff!")
    result = CairnSource().verify(Delivery(Headers(headers), tampered), SECRET, NOW)
    assert not result.ok
    assert SIG in result.detail


def test_unsigned_garbage_reports_the_signature_not_the_json() -> None:
    # The body is never parsed until the HMAC matched.
    delivery = Delivery(Headers({SIG: "sha256=00"}), b"\xff\xfe not json")
    assert SIG in CairnSource().verify(delivery, SECRET, NOW).detail


def test_ok_carries_event_id_and_the_signed_kind() -> None:
    # The unsigned X-Cairn-Event header never decides the kind.
    result = CairnSource().verify(signed(event(), **{"X-Cairn-Event": "x"}), SECRET, NOW)
    assert result.ok and result.verified
    assert result.delivery_id == EVENT_ID
    assert result.kind == "artifact.created"


def test_body_without_kind_has_no_kind() -> None:
    result = CairnSource().verify(signed(event(kind=None)), SECRET, NOW)
    assert result.ok and result.kind is None


def test_an_overlong_event_id_is_keyed_by_its_own_hash() -> None:
    body = event(event_id="e" * 257)
    result = CairnSource().verify(signed(body), SECRET, NOW)
    assert result.ok
    assert result.delivery_id == long_id_key("e" * 257) != body_key(body)


@pytest.mark.parametrize("window,ok", [(10.0, False), (60.0, True)])
def test_window_is_a_constructor_parameter(window: float, ok: bool) -> None:
    result = CairnSource(window_seconds=window).verify(signed(event()), SECRET, NOW + 30)
    assert result.ok is ok


# --------------------------------------------------------------------------------------
# [plugins.cairn] freshness_seconds: read at registration, through a runtime's config
# --------------------------------------------------------------------------------------


def _runtime(tmp_path: Path, toml: str, dsn: str | None = None) -> Runtime:
    path = tmp_path / "switchboard.toml"
    path.write_text(toml)
    env = make_env(dsn, tmp_path / "data", SWITCHBOARD_CONFIG=str(path))
    return Runtime(load_config(env=env))


@asynccontextmanager
async def _cairn_webhook(
    tmp_path: Path, dsn: str, toml: str
) -> AsyncIterator[Callable[[float], Any]]:
    """A runtime from ``toml`` with one cairn webhook; yields ``post(age)`` → its status."""
    rt = _runtime(tmp_path, toml, dsn)
    await rt.open_store(migrate=False)
    try:
        await identity.add_human(rt, "alice")
        made = await identity.vend_endpoint(
            rt, owner="alice", name="owner", queues=["inbox"], webhook_queues=["inbox"],
            source_types=["cairn"], webhook_max=1,
        )  # fmt: skip
        owner = await rt.store.get_endpoint(made["endpoint_id"])
        hook = await webhooks.create_webhook(rt, owner, "cairn", "inbox")
        token = str(hook["ingest_url"]).rsplit("/", 1)[1]
        secret = str(hook["signing_secret"]).encode()

        async def post(age: float) -> int:
            # Cairn stamps created_at when it emits: this delivery was emitted ``age`` s ago.
            body = CairnSource().prepare(event(), stamp=True, now=time.time() - age)
            headers = CairnSource().sign(body, secret, None)
            reply = await ingest(rt, token, Headers(headers), body, "application/json")
            return reply.status

        yield post
    finally:
        await rt.shutdown()


@pytest.mark.parametrize(
    "toml,age,status",
    [
        ("", 200, 202),  # the default window is 300 s
        ("", 400, 401),
        ("[plugins.cairn]\nfreshness_seconds = 60\n", 30, 202),
        ("[plugins.cairn]\nfreshness_seconds = 60\n", 120, 401),
        ("[plugins.cairn]\nfreshness_seconds = 3600\n", 1800, 202),
    ],
    ids=["default-younger", "default-older", "60-younger", "60-older", "3600-older-than-300"],
)
async def test_configured_freshness_window_decides_what_is_accepted(
    tmp_path: Path, dsn: str, toml: str, age: float, status: int
) -> None:
    async with _cairn_webhook(tmp_path, dsn, toml) as post:
        assert await post(age) == status


@pytest.mark.parametrize(
    "toml,window", [("", 300), ("[plugins.cairn]\nfreshness_seconds = 45\n", 45)]
)
def test_the_registered_source_carries_the_configured_window(
    tmp_path: Path, toml: str, window: float
) -> None:
    source = _runtime(tmp_path, toml).registries.sources.get("cairn")
    assert isinstance(source, CairnSource) and source.window_seconds == window


@pytest.mark.parametrize(
    "toml,key",
    [
        ("[plugins.cairn]\nfreshness_seconds = 0\n", "plugins.cairn.freshness_seconds"),
        ('[plugins.cairn]\nfreshness_seconds = "5m"\n', "plugins.cairn.freshness_seconds"),
        ("[plugins.cairn]\nwindow = 60\n", "plugins.cairn.window"),
        # The old host key is gone: the cairn plugin owns its window.
        ("[ingest]\ncairn_freshness_seconds = 60\n", "ingest.cairn_freshness_seconds"),
    ],
)
def test_invalid_cairn_config_names_the_key(tmp_path: Path, toml: str, key: str) -> None:
    with pytest.raises(ConfigError, match=f": {key}:"):
        _runtime(tmp_path, toml)


def test_recorded_fixture_verifies_at_its_own_created_at(recorded: Any) -> None:
    fixture = recorded("cairn_artifact_created")
    result = CairnSource().verify(fixture.delivery(), fixture.secret, NOW)
    assert result.ok and result.verified
    assert (result.delivery_id, result.kind) == (EVENT_ID, "artifact.created")
    assert not CairnSource().verify(fixture.delivery(), fixture.secret, NOW + 3600).ok


@pytest.mark.parametrize(
    "text,iso",
    [
        ("2026-09-11T17:04:05Z", "2026-09-11T17:04:05+00:00"),
        ("2026-09-11t17:04:05z", "2026-09-11T17:04:05+00:00"),
        ("2026-09-11 17:04:05+02:00", "2026-09-11T17:04:05+02:00"),
        ("2026-09-11T17:04:05.5Z", "2026-09-11T17:04:05.500000+00:00"),
        ("2026-09-11T17:04:05", None),
        ("2026-09-11", None),
        ("20260911T170405Z", None),
        ("2026-09-11T17:04:60Z", None),
        ("2026-13-11T17:04:05Z", None),
    ],
)
def test_parse_rfc3339(text: str, iso: str | None) -> None:
    parsed = parse_rfc3339(text)
    assert (parsed.isoformat() if parsed else None) == iso
