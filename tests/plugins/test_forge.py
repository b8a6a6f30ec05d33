"""The github and gitea sources' truth tables, and the helpers they share."""

from __future__ import annotations

from typing import Any

import pytest
from switchboard_gitea.source import GiteaSource, bare_signature_matches
from switchboard_github.source import GithubSource

from switchboard.plugin import (
    Delivery,
    Headers,
    body_key,
    delivery_key,
    hmac_sha256_hex,
    long_id_key,
    usable_delivery_id,
)


def deliver(body: bytes, headers: dict[str, str]) -> Delivery:
    return Delivery(Headers(headers), body)


SECRET = b"forge-secret"
BODY = b'{"action":"opened","issue":{"number":1}}'
MAC = hmac_sha256_hex(SECRET, BODY)
WRONG = hmac_sha256_hex(b"not-the-secret", BODY)
NOW = 0.0

GITHUB_CASES = [
    # (id, headers, secret, ok, detail fragment)
    ("right secret", {"X-Hub-Signature-256": f"sha256={MAC}"}, SECRET, True, ""),
    ("wrong secret", {"X-Hub-Signature-256": f"sha256={WRONG}"}, SECRET, False, "match"),
    ("missing header", {}, SECRET, False, "missing X-Hub-Signature-256"),
    ("empty header", {"X-Hub-Signature-256": ""}, SECRET, False, "missing"),
    ("bare hex needs the prefix", {"X-Hub-Signature-256": MAC}, SECRET, False, "match"),
    ("upper-case hex", {"X-Hub-Signature-256": f"sha256={MAC.upper()}"}, SECRET, False, "match"),
    ("no secret", {"X-Hub-Signature-256": f"sha256={MAC}"}, None, False, "secret"),
    ("empty secret", {"X-Hub-Signature-256": f"sha256={MAC}"}, b"", False, "secret"),
    ("gitea header is not github's", {"X-Gitea-Signature": MAC}, SECRET, False, "missing"),
]

GITEA_CASES = [
    ("bare hex", {"X-Gitea-Signature": MAC}, SECRET, True, ""),
    ("hub header fallback", {"X-Hub-Signature-256": f"sha256={MAC}"}, SECRET, True, ""),
    (
        "both right",
        {"X-Gitea-Signature": MAC, "X-Hub-Signature-256": f"sha256={MAC}"},
        SECRET,
        True,
        "",
    ),
    ("wrong bare hex", {"X-Gitea-Signature": WRONG}, SECRET, False, "X-Gitea-Signature"),
    (
        "wrong bare hex never falls back to a right hub header",
        {"X-Gitea-Signature": WRONG, "X-Hub-Signature-256": f"sha256={MAC}"},
        SECRET,
        False,
        "X-Gitea-Signature",
    ),
    (
        "prefixed value in the bare header",
        {"X-Gitea-Signature": f"sha256={MAC}"},
        SECRET,
        False,
        "match",
    ),
    (
        "bare value in the hub header",
        {"X-Hub-Signature-256": MAC},
        SECRET,
        False,
        "X-Hub-Signature-256",
    ),
    (
        "empty bare header falls back",
        {"X-Gitea-Signature": "", "X-Hub-Signature-256": f"sha256={MAC}"},
        SECRET,
        True,
        "",
    ),
    ("missing both", {}, SECRET, False, "missing"),
    ("no secret", {"X-Gitea-Signature": MAC}, None, False, "secret"),
]


def _check(
    source: Any, headers: dict[str, str], secret: bytes | None, ok: bool, fragment: str
) -> None:
    result = source.verify(deliver(BODY, headers), secret, NOW)
    assert result.ok is ok, result.detail
    assert result.verified is ok
    assert fragment in result.detail
    if not ok:
        assert MAC not in result.detail and result.delivery_id is None


@pytest.mark.parametrize(
    "headers,secret,ok,fragment", [c[1:] for c in GITHUB_CASES], ids=[c[0] for c in GITHUB_CASES]
)
def test_github_truth_table(
    headers: dict[str, str], secret: bytes | None, ok: bool, fragment: str
) -> None:
    _check(GithubSource(), headers, secret, ok, fragment)


@pytest.mark.parametrize(
    "headers,secret,ok,fragment", [c[1:] for c in GITEA_CASES], ids=[c[0] for c in GITEA_CASES]
)
def test_gitea_truth_table(
    headers: dict[str, str], secret: bytes | None, ok: bool, fragment: str
) -> None:
    _check(GiteaSource(), headers, secret, ok, fragment)


@pytest.mark.parametrize("source", [GithubSource(), GiteaSource()], ids=["github", "gitea"])
def test_tampered_body_is_refused(source: Any) -> None:
    headers = {"X-Hub-Signature-256": f"sha256={MAC}", "X-Gitea-Signature": MAC}
    result = source.verify(deliver(BODY + b" ", headers), SECRET, NOW)
    assert not result.ok


def test_gitea_reports_which_header_it_checked() -> None:
    bare = GiteaSource().verify(deliver(BODY, {"X-Gitea-Signature": MAC}), SECRET, NOW)
    hub = GiteaSource().verify(deliver(BODY, {"X-Hub-Signature-256": f"sha256={MAC}"}), SECRET, NOW)
    assert bare.extra["signature_header"] == "x-gitea-signature"
    assert hub.extra["signature_header"] == "x-hub-signature-256"


LONG_ID = "d" * 257

DELIVERY_CASES = [
    # (id, source, headers, expected id; None = the body key)
    ("github id", GithubSource(), {"X-GitHub-Delivery": "gh-1"}, "gh-1"),
    ("github without id", GithubSource(), {}, None),
    ("github ignores gitea's id", GithubSource(), {"X-Gitea-Delivery": "gt-1"}, None),
    (
        "github over-long id: its hash",
        GithubSource(),
        {"X-GitHub-Delivery": LONG_ID},
        long_id_key(LONG_ID),
    ),
    ("github 256-byte id", GithubSource(), {"X-GitHub-Delivery": "d" * 256}, "d" * 256),
    (
        "gitea prefers its own",
        GiteaSource(),
        {"X-Gitea-Delivery": "gt-1", "X-GitHub-Delivery": "gh-1"},
        "gt-1",
    ),
    ("gitea github-compatible id", GiteaSource(), {"X-GitHub-Delivery": "gh-1"}, "gh-1"),
    (
        "gitea over-long own id falls back",
        GiteaSource(),
        {"X-Gitea-Delivery": LONG_ID, "X-GitHub-Delivery": "gh-1"},
        "gh-1",
    ),
    ("gitea without id", GiteaSource(), {}, None),
]


@pytest.mark.parametrize(
    "source,headers,expected", [c[1:] for c in DELIVERY_CASES], ids=[c[0] for c in DELIVERY_CASES]
)
def test_delivery_id_precedence(source: Any, headers: dict[str, str], expected: str | None) -> None:
    signature = {"X-Hub-Signature-256": f"sha256={MAC}"}
    result = source.verify(deliver(BODY, {**headers, **signature}), SECRET, NOW)
    assert result.ok
    assert result.delivery_id == (expected if expected is not None else body_key(BODY))


KIND_CASES = [
    # (id, headers, github's kind, gitea's kind)
    (
        "both forge headers",
        {"X-GitHub-Event": "issues", "X-Gitea-Event": "push", "X-Cairn-Event": "x"},
        "issues",
        "issues",
    ),
    ("gitea's own header", {"X-Gitea-Event": "push"}, None, "push"),
    ("cairn's header is neither's", {"X-Cairn-Event": "artifact.created"}, None, None),
    ("empty values skipped", {"X-GitHub-Event": "", "X-Gitea-Event": "push"}, None, "push"),
    ("case-insensitive names", {"x-github-event": "ping"}, "ping", "ping"),
    ("none", {"X-Event": "custom"}, None, None),
]


@pytest.mark.parametrize(
    "headers,github,gitea", [c[1:] for c in KIND_CASES], ids=[c[0] for c in KIND_CASES]
)
def test_kind_precedence(headers: dict[str, str], github: str | None, gitea: str | None) -> None:
    signature = {"X-Hub-Signature-256": f"sha256={MAC}"}
    for source, kind in ((GithubSource(), github), (GiteaSource(), gitea)):
        result = source.verify(deliver(BODY, {**headers, **signature}), SECRET, NOW)
        assert result.kind == kind, source.name
        assert source.identify(Headers(headers), BODY).kind == kind, source.name


@pytest.mark.parametrize(
    "given,ok",
    [(MAC, True), (MAC.upper(), False), (f"sha256={MAC}", False), ("", False), (None, False)],
)
def test_gitea_bare_signature(given: str | None, ok: bool) -> None:
    assert bare_signature_matches(given, SECRET, BODY) is ok


@pytest.mark.parametrize(
    "value,usable",
    [(None, False), ("", False), ("x", True), ("é" * 128, True), ("é" * 129, False)],
)
def test_usable_delivery_id_counts_bytes(value: str | None, usable: bool) -> None:
    assert (usable_delivery_id(value) is not None) is usable


def test_delivery_key_falls_back_to_the_body_hash() -> None:
    assert delivery_key(Headers({}), ("X-GitHub-Delivery",), b"abc") == body_key(b"abc")


@pytest.mark.parametrize(
    "source,name,kind,delivery_id",
    [
        (GithubSource(), "github_issues_opened", "issues", "72d3162e-cc78-11e3-81ab-4c9367dc0958"),
        (
            GithubSource(),
            "github_pull_request_opened",
            "pull_request",
            "8a1f9b40-cc79-11e3-8c2e-1e4f3b9a0d77",
        ),
        (
            GiteaSource(),
            "gitea_issues_label_updated",
            "issues",
            "0c4a2f35-8d0e-4b7b-9a4e-6a0bd1c9e7f2",
        ),
    ],
)
def test_recorded_fixtures_verify(
    recorded: Any, source: Any, name: str, kind: str, delivery_id: str
) -> None:
    fixture = recorded(name)
    result = source.verify(fixture.delivery(), fixture.secret, NOW)
    assert result.ok and result.verified
    assert (result.kind, result.delivery_id) == (kind, delivery_id)
    assert not source.verify(fixture.delivery(), SECRET, NOW).ok
