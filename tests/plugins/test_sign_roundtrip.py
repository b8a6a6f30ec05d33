"""Every source's ``sign()`` produces headers its own ``verify()`` accepts."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from switchboard_cairn.source import CairnSource
from switchboard_generic.source import GenericSource
from switchboard_gitea.source import GiteaSource
from switchboard_github.source import GithubSource

from switchboard.sources import Delivery, Headers


def deliver(body: bytes, headers: dict[str, str]) -> Delivery:
    return Delivery(Headers(headers), body)


SECRET = b"round-trip-secret-0123456789abcdef"
CAIRN_NOW = datetime.fromisoformat("2026-09-11T17:04:05+00:00").timestamp()
FIXTURES = [
    "cairn_artifact_created",
    "gitea_issues_label_updated",
    "github_issues_opened",
    "github_pull_request_opened",
    "generic_alert",
]
SOURCES: list[Any] = [CairnSource(), GiteaSource(), GithubSource(), GenericSource()]


# Cairn only signs its own event shape (its verify needs event_id and created_at).
PAIRS = [(s, f) for s in SOURCES for f in FIXTURES if s.name != "cairn" or f.startswith("cairn")]


@pytest.mark.parametrize("source,fixture", PAIRS, ids=[f"{s.name}-{f}" for s, f in PAIRS])
def test_sign_then_verify(recorded: Any, source: Any, fixture: str) -> None:
    body = recorded(fixture).body
    headers = source.sign(body, SECRET, "issues")
    result = source.verify(deliver(body, headers), SECRET, CAIRN_NOW)
    assert result.ok, result.detail
    assert result.verified is (source.trust_mode == "signed")
    # The wrong secret fails for every signed source.
    if source.trust_mode == "signed":
        assert not source.verify(deliver(body, headers), b"other", CAIRN_NOW).ok


@pytest.mark.parametrize("source", SOURCES[1:], ids=[s.name for s in SOURCES[1:]])
def test_sign_uses_the_given_delivery_id(source: Any) -> None:
    headers = source.sign(b"{}", SECRET, None, delivery_id="fixed-id")
    assert source.verify(deliver(b"{}", headers), SECRET, 0.0).delivery_id == "fixed-id"


@pytest.mark.parametrize("source", SOURCES[:3], ids=[s.name for s in SOURCES[:3]])
def test_sign_without_secret_is_unsigned_and_refused(recorded: Any, source: Any) -> None:
    body = recorded("cairn_artifact_created").body
    headers = source.sign(body, None, "issues")
    assert not any("signature" in name.lower() for name in headers)
    assert not source.verify(deliver(body, headers), SECRET, CAIRN_NOW).ok


def test_gitea_sign_splits_coarse_event_and_detailed_type() -> None:
    headers = GiteaSource().sign(b"{}", SECRET, "issue_label")
    assert headers["X-Gitea-Event"] == headers["X-GitHub-Event"] == "issues"
    assert headers["X-Gitea-Event-Type"] == "issue_label"
    assert headers["X-Hub-Signature-256"] == "sha256=" + headers["X-Gitea-Signature"]


def test_cairn_sign_mirrors_the_body(recorded: Any) -> None:
    body = recorded("cairn_artifact_created").body
    headers = CairnSource().sign(body, SECRET, None)
    assert headers["X-Cairn-Event"] == "artifact.created"
    assert headers["X-Cairn-Event-Id"] == "6f1c1f0e-7f5b-4b8e-9a51-3f7f2c1d9b20"
    assert headers["User-Agent"] == "cairn-outboundhook/1"
    assert CairnSource().sign(body, SECRET, "comment.created")["X-Cairn-Event"] == "comment.created"


def test_generic_sends_no_kind() -> None:
    headers = GenericSource().sign(b"{}", None, "issues")
    assert set(headers) == {"Content-Type", "X-Delivery-Id"}
