"""A forge's own secret, as its settings page takes it: spaces and all (GitHub's example)."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from sbtest import CLI, remember_secrets
from sbworld import World

from switchboard.errors import InvalidArgument
from switchboard.plugins import build_registries, make_plugin_manager
from switchboard.service.webhooks import check_secret
from switchboard.sources import Delivery, Headers

#: GitHub's published test vector ("Validating webhook deliveries", docs.github.com).
GITHUB_SECRET = "It's a Secret to Everybody"
GITHUB_BODY = b"Hello, World!"
GITHUB_SIGNATURE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"


@pytest.mark.parametrize(
    "given,kept",
    [
        (GITHUB_SECRET, GITHUB_SECRET),
        (GITHUB_SECRET + "\n", GITHUB_SECRET),  # a file's newline is not the secret
        ("  padded secret  ", "padded secret"),
        ("clé secrète ünïcode", "clé secrète ünïcode"),
        ("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
    ],
)
def test_any_printable_secret_is_taken(given: str, kept: str) -> None:
    assert check_secret(given) == kept


@pytest.mark.parametrize(
    "given,says",
    [
        ("tab\tinside secret", "control characters"),
        ("nul\x00inside secret", "control characters"),
        ("line\nbreak inside", "control characters"),
        ("short", "8 to 1024 bytes"),
        ("x" * 1025, "8 to 1024 bytes"),
        (12345678, "must be a string"),
    ],
)
def test_what_no_forge_would_send_is_refused_naming_the_field(given: Any, says: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        check_secret(given)
    assert str(err.value).startswith("signing_secret: ") and says in str(err.value)


@pytest.mark.parametrize("source", ["github", "gitea"])
def test_githubs_published_vector_verifies(source: str) -> None:
    installed = build_registries(make_plugin_manager())
    mac = GITHUB_SIGNATURE.removeprefix("sha256=")
    header = {
        "github": ("X-Hub-Signature-256", GITHUB_SIGNATURE),
        "gitea": ("X-Gitea-Signature", mac),
    }
    name, value = header[source]
    delivery = Delivery(headers=Headers({name: value}), body=GITHUB_BODY, config={})
    verdict = installed.sources.get(source).verify(delivery, GITHUB_SECRET.encode(), 0.0)
    assert verdict.ok and verdict.verified, verdict.detail


def test_a_secret_with_spaces_through_the_live_receiver(
    server_factory: Any, dsn: str, tmp_path: Path
) -> None:
    remember_secrets({"signing_secret": GITHUB_SECRET})  # server logs are scanned for it
    srv = server_factory(dsn)
    w = World(CLI(srv.env))
    w.human("alice")
    ep = w.endpoint("alice", "owner")
    secret_file = tmp_path / "secret"
    secret_file.write_text(GITHUB_SECRET + "\n")
    hook = CLI(srv.env).json(
        "webhook", "create", "--endpoint", ep["endpoint_id"], "--source", "github",
        "--target-queue", "inbox", "--secret-file", str(secret_file),
    )  # fmt: skip
    assert hook["signing_secret_imported"] is True
    body = json.dumps({"action": "opened", "issue": {"number": 1}}).encode()
    mac = hmac.new(GITHUB_SECRET.encode(), body, hashlib.sha256).hexdigest()
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": "issues",
        "X-GitHub-Delivery": "d-spaces-1",
        "X-Hub-Signature-256": f"sha256={mac}",
    }
    ok = httpx.post(hook["ingest_url"], content=body, headers=headers, timeout=30)
    assert ok.status_code == 202, ok.text
    assert ok.json()["verified"] is True
    # GitHub's published vector itself, byte for byte, through the live receiver.
    published = {
        "Content-Type": "text/plain",
        "X-GitHub-Event": "ping",
        "X-GitHub-Delivery": "d-published-vector",
        "X-Hub-Signature-256": GITHUB_SIGNATURE,
    }
    vector = httpx.post(hook["ingest_url"], content=GITHUB_BODY, headers=published, timeout=30)
    assert vector.status_code == 202, vector.text
    assert vector.json()["verified"] is True
    trimmed = hmac.new(b"It'saSecrettoEverybody", body, hashlib.sha256).hexdigest()
    forged = {**headers, "X-Hub-Signature-256": f"sha256={trimmed}"}
    assert (
        httpx.post(hook["ingest_url"], content=body, headers=forged, timeout=30).status_code == 401
    )
