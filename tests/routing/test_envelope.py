"""The envelope over recorded deliveries: every key present, projections filled or null."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from switchboard_cairn.projection import ARTIFACT_KEYS
from switchboard_forge import ISSUE_KEYS

from switchboard.plugin import Projection
from switchboard.plugins import build_registries, make_plugin_manager
from switchboard.registry import ProjectionRegistry
from switchboard.routing.envelope import build_envelope, parse_payload
from switchboard.sanitize import sanitize_headers

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
FACTS = (
    "source",
    "kind",
    "webhook_id",
    "trust_mode",
    "verified",
    "content_type",
    "size",
    "headers",
    "payload",
)


@pytest.fixture(scope="module")
def projections() -> ProjectionRegistry:
    """The first-party projections, registered through the plugin hooks like in production."""
    return build_registries(make_plugin_manager()).projections


def load(name: str) -> tuple[bytes, dict[str, str]]:
    body = (FIXTURES / f"{name}.json").read_bytes()
    headers = json.loads((FIXTURES / f"{name}.headers.json").read_text(encoding="utf-8"))
    return body, headers


def envelope(
    projections: ProjectionRegistry, source: str, kind: str | None, body: bytes, **extra: Any
) -> dict[str, Any]:
    headers = extra.pop("headers", {"Content-Type": "application/json"})
    return build_envelope(
        source=source,
        kind=kind,
        webhook_id="wh_1",
        trust_mode="token" if source == "generic" else "signed",
        verified=source != "generic",
        content_type="application/json",
        headers=sanitize_headers(headers),
        body=body,
        projections=projections,
    )


def fixture_envelope(
    projections: ProjectionRegistry, name: str, source: str, kind: str | None
) -> dict[str, Any]:
    body, headers = load(name)
    return envelope(projections, source, kind, body, headers=headers)


RECORDED = [
    ("cairn_artifact_created", "cairn", "artifact.created", "artifact"),
    ("gitea_issues_label_updated", "gitea", "issues", "issue"),
    ("github_issues_opened", "github", "issues", "issue"),
    ("github_pull_request_opened", "github", "pull_request", None),
    ("generic_alert", "generic", None, None),
]


@pytest.mark.parametrize("name,source,kind,filled", RECORDED)
def test_every_key_is_present(
    projections: ProjectionRegistry, name: str, source: str, kind: str | None, filled: str | None
) -> None:
    env = fixture_envelope(projections, name, source, kind)
    # Facts first, then every registered projection key (in plugin registration order).
    assert list(env)[: len(FACTS)] == list(FACTS)
    assert list(env)[len(FACTS) :] == projections.envelope_keys()
    assert {"artifact", "issue"} <= set(projections.envelope_keys())
    assert env["source"] == source and env["kind"] == kind and env["webhook_id"] == "wh_1"
    assert env["size"] == len(load(name)[0])
    assert env["payload"] == json.loads(load(name)[0])
    for key, keys in (("artifact", ARTIFACT_KEYS), ("issue", ISSUE_KEYS)):
        if key == filled:
            assert list(env[key]) == list(keys)
        else:
            assert env[key] is None
    # What rules see is JSON through and through (no NaN, no Infinity, no Python objects).
    json.dumps(env, allow_nan=False)


def test_headers_are_the_sanitized_ones(projections: ProjectionRegistry) -> None:
    env = fixture_envelope(projections, "github_issues_opened", "github", "issues")
    assert env["headers"]["x-hub-signature-256"] == "«redacted»"
    assert env["headers"]["x-github-event"] == "issues"


def test_artifact_projection(projections: ProjectionRegistry) -> None:
    artifact = fixture_envelope(projections, "cairn_artifact_created", "cairn", "artifact.created")[
        "artifact"
    ]
    assert artifact == {
        "event_id": "6f1c1f0e-7f5b-4b8e-9a51-3f7f2c1d9b20",
        "kind": "artifact.created",
        "created_at": "2026-09-11T17:04:05Z",
        "id": "a1b2c3d4e5",
        "url": "https://cairn.stump.wtf/a1b2c3d4e5",
        "title": "handoff: audit the backup job",
        "share_type": "markdown",
        "channel": "via MCP",
        "model": "claude-opus-5",
        "actor_id": "you@example.com",
        "on_behalf_of": "claude-code/2.1.0",
        "expires_at": "2026-09-18T17:04:05Z",
        "tags": ["handoff", "lane:m", "reply:cairn-comment"],
        "metadata": None,
        "handle": "mcp://cairn/a1b2c3d4e5",
    }


@pytest.mark.parametrize(
    "doc",
    [
        {"kind": "artifact.created"},
        {"kind": "artifact.created", "data": "not an object"},
        {"kind": "artifact.created", "data": {"id": 7, "tags": "handoff", "title": None}},
    ],
)
def test_artifact_keys_null_when_absent_or_mistyped(
    projections: ProjectionRegistry, doc: dict[str, Any]
) -> None:
    artifact = envelope(projections, "cairn", "artifact.created", json.dumps(doc).encode())[
        "artifact"
    ]
    assert list(artifact) == list(ARTIFACT_KEYS)
    assert artifact["kind"] == "artifact.created"
    assert all(artifact[k] is None for k in ARTIFACT_KEYS if k != "kind")


def test_artifact_null_when_payload_is_not_an_object(projections: ProjectionRegistry) -> None:
    assert envelope(projections, "cairn", None, b"[1]")["artifact"] is None
    assert envelope(projections, "cairn", None, b"not json")["artifact"] is None


def test_gitea_issue_projection(projections: ProjectionRegistry) -> None:
    body, _ = load("gitea_issues_label_updated")
    issue = fixture_envelope(projections, "gitea_issues_label_updated", "gitea", "issues")["issue"]
    assert issue == {
        "provider": "gitea",
        "action": "label_updated",
        # X-Gitea-Event-Type first (as Gitea reads it), falling back to the event
        "event_type": "issue_label",
        "repo": "ops/backup",
        "number": 42,
        "title": "Nightly backup skips the attachments volume",
        "url": "https://git.example.org/ops/backup/issues/42",
        "state": "open",
        "author": "mara",
        "sender": "mara",
        "labels": ["bug", "agent:triage"],
        "label": None,
        "body_size": len(json.loads(body)["issue"]["body"].encode()),
        "label_event": True,
        "key": "gitea:ops/backup#42",
    }


def test_gitea_detailed_event_type_also_projects(projections: ProjectionRegistry) -> None:
    issue = fixture_envelope(projections, "gitea_issues_label_updated", "gitea", "issue_label")[
        "issue"
    ]
    assert issue["event_type"] == "issue_label" and issue["key"] == "gitea:ops/backup#42"


def test_gitea_event_type_falls_back_to_the_event(projections: ProjectionRegistry) -> None:
    body, headers = load("gitea_issues_label_updated")
    headers = {k: v for k, v in headers.items() if not k.lower().endswith("-event-type")}
    env = build_envelope(
        source="gitea",
        kind="issues",
        webhook_id="w",
        trust_mode="signed",
        verified=True,
        content_type="application/json",
        headers=sanitize_headers(headers),
        body=body,
        projections=projections,
    )
    assert env["issue"]["event_type"] == "issues"


def test_github_issue_projection(projections: ProjectionRegistry) -> None:
    issue = fixture_envelope(projections, "github_issues_opened", "github", "issues")["issue"]
    assert issue["provider"] == "github"
    assert issue["key"] == "github:acme/widgets#1347"
    assert (issue["action"], issue["author"], issue["sender"]) == ("opened", "octocat", "octocat")
    assert issue["labels"] == ["bug"] and issue["label"] is None and issue["label_event"] is False
    # Bytes, not characters: the body has multi-byte quotes and an umlaut.
    body = "Exporting a widget named “Zoë” drops the row.\r\n\r\nSteps: create it, export CSV."
    assert issue["body_size"] == len(body.encode("utf-8")) > len(body)


def issue_doc(**changes: Any) -> dict[str, Any]:
    body, _ = load("github_issues_opened")
    doc: dict[str, Any] = json.loads(body)
    doc.update(changes)
    return doc


@pytest.mark.parametrize(
    "doc,kind,check",
    [
        (
            issue_doc(action="labeled", label={"name": "agent:triage"}),
            "issues",
            {"label": "agent:triage", "label_event": True},
        ),
        (issue_doc(action="unlabeled", label={"name": "bug"}), "issues", {"label_event": True}),
        (issue_doc(action="closed"), "issues", {"label": None, "label_event": False}),
        (
            issue_doc(issue={"number": 3, "labels": None, "body": None}),
            "issues",
            {"labels": [], "body_size": 0, "title": None, "key": "github:acme/widgets#3"},
        ),
        (issue_doc(repository=None), "issues", {"repo": None, "key": None}),
    ],
)
def test_issue_variants(
    projections: ProjectionRegistry, doc: dict[str, Any], kind: str, check: dict[str, Any]
) -> None:
    issue = envelope(projections, "github", kind, json.dumps(doc).encode())["issue"]
    assert list(issue) == list(ISSUE_KEYS)
    assert {k: issue[k] for k in check} == check


@pytest.mark.parametrize(
    "source,kind,doc",
    [
        ("github", "pull_request", issue_doc()),
        ("github", "issue_comment", issue_doc()),
        ("github", "issues", issue_doc(pull_request={"url": "x"})),
        ("github", "issues", issue_doc(issue={"number": 1, "pull_request": {"url": "x"}})),
        ("gitea", "issues", issue_doc(issue={"number": 1, "pull_request": {"merged": False}})),
        ("github", "issue_label", issue_doc()),
        ("github", "issues", {"action": "opened"}),
        ("github", None, issue_doc()),
    ],
)
def test_issue_null_when_not_an_issue_event(
    projections: ProjectionRegistry, source: str, kind: str | None, doc: dict[str, Any]
) -> None:
    assert envelope(projections, source, kind, json.dumps(doc).encode())["issue"] is None


def test_large_integers_stay_exact(projections: ProjectionRegistry) -> None:
    env = fixture_envelope(projections, "generic_alert", "generic", None)
    assert env["payload"]["bytes_free"] == 12345678901234567890123
    assert isinstance(env["payload"]["bytes_free"], int)
    assert env["trust_mode"] == "token" and env["verified"] is False


MAX = sys.float_info.max


def _nested(value: Any, depth: int) -> Any:
    for _ in range(depth):
        value = [value]
    return value


PAYLOADS = [
    # (id, body, parsed payload)
    ("object", b'{"a": 1}', {"a": 1}),
    ("surrounding whitespace", b' \n[1, "x"]\t', [1, "x"]),
    ("scalar", b'"text"', "text"),
    ("big int", b"12345678901234567890123", 12345678901234567890123),
    ("negative big int", b"-12345678901234567890123", -12345678901234567890123),
    ("overflowing float", b"1e400", MAX),
    ("negative overflowing float", b"[-1e400]", [-MAX]),
    ("float", b"0.5", 0.5),
    ("empty", b"", None),
    ("whitespace only", b" \r\n\t ", None),
    ("two values", b'{"a": 1} {"b": 2}', None),
    ("trailing garbage", b"[1]x", None),
    ("invalid utf-8", b'{"a": "\xff"}', None),
    ("NaN", b"NaN", None),
    ("Infinity inside", b'{"a": Infinity}', None),
    ("-Infinity", b"[-Infinity]", None),
    ("not json", b"hello", None),
    ("deep nesting", b"[" * 100_000 + b"]" * 100_000, None),
    # The same bound on every Python (3.13 decodes far deeper than 3.11 and 3.12 do).
    ("nesting past MAX_DEPTH", b"[" * 513 + b"]" * 513, None),
    ("objects past MAX_DEPTH", b'{"a":' * 513 + b"1" + b"}" * 513, None),
    ("nesting at MAX_DEPTH", b"[" * 511 + b"[1]" + b"]" * 511, _nested([1], 511)),
    ("nesting past the recursion limit", b"[" * 3000 + b"]" * 3000, None),
    ("utf-8 text", '{"t": "Zoë"}'.encode(), {"t": "Zoë"}),
]


@pytest.mark.parametrize("body,expected", [p[1:] for p in PAYLOADS], ids=[p[0] for p in PAYLOADS])
def test_parse_payload(body: bytes, expected: Any) -> None:
    assert parse_payload(body) == expected


def test_invalid_json_keeps_every_other_key(projections: ProjectionRegistry) -> None:
    env = envelope(projections, "github", "issues", b"{not json")
    assert env["payload"] is None and env["issue"] is None and env["size"] == 9


def test_pure_and_unshared(projections: ProjectionRegistry) -> None:
    body, headers = load("cairn_artifact_created")
    first = envelope(projections, "cairn", "artifact.created", body, headers=headers)
    second = envelope(projections, "cairn", "artifact.created", body, headers=headers)
    assert first == second
    # Projections never alias the payload, so nothing downstream can change one via the other.
    first["artifact"]["tags"].append("mutated")
    assert first["payload"]["data"]["tags"] == ["handoff", "lane:m", "reply:cairn-comment"]
    given = {"x-a": "1"}
    env = build_envelope(
        source="generic",
        kind=None,
        webhook_id="w",
        trust_mode="token",
        verified=False,
        content_type=None,
        headers=given,
        body=b"{}",
        projections=projections,
    )
    assert env["headers"] == given and env["headers"] is not given


def _registry(*items: Projection) -> ProjectionRegistry:
    registry = ProjectionRegistry()
    for item in items:
        registry.add(item)
    return registry


def _raise(source: str, kind: str | None, payload: Any) -> dict[str, Any] | None:
    raise RuntimeError("plugin bug")


def test_third_party_projections() -> None:
    registry = _registry(
        Projection("partial", ("generic",), ("a", "b"), lambda s, k, p: {"a": 1, "zzz": 2}),
        Projection("broken", ("generic",), ("a",), _raise),
        Projection("verified", ("generic",), ("a",), lambda s, k, p: {"a": "forged"}),
        Projection("other", ("github",), ("a",), lambda s, k, p: {"a": 1}),
    )
    env = build_envelope(
        source="generic",
        kind=None,
        webhook_id="w",
        trust_mode="token",
        verified=False,
        content_type=None,
        headers={},
        body=b"{}",
        projections=registry,
    )
    # Declared keys only, missing ones null; a failing builder reads null; a projection
    # can never overwrite a switchboard fact; another source's projection is null here.
    assert env["partial"] == {"a": 1, "b": None}
    assert env["broken"] is None
    assert env["verified"] is False
    assert env["other"] is None


@pytest.mark.parametrize(
    "body",
    [
        b'{"a": "\\u0000", "b": 1}',
        b'{"a": "\\ud800"}',
        b'{"\\udfff": "key"}',
        b'{"a": "\\\\u0000 is text, not NUL"}',
        b'{"a": "\\ud83d\\ude00"}',
        b'{"a": [1, 2.5, -0, 1e400, 12345678901234567890]}',
        b"[" * 600 + b"]" * 600,
        b'{"a": "' + b"[" * 600 + b'"}',
        b'{"n": ' + b"9" * 5000 + b"}",
    ],
)
def test_the_fast_paths_parse_and_clean_exactly_as_the_walk(body: bytes) -> None:
    """clean_payload skips the depth walk, the clean and the big-int guard only where the raw
    bytes prove them needless: the result is always what the full path gives."""
    import sys

    from switchboard.pgtext import clean_json
    from switchboard.routing import envelope as env

    limit = sys.get_int_max_str_digits()
    try:
        text = body.decode()
        full = json.loads(
            text,
            parse_float=env._parse_float,
            parse_int=env._parse_int,
            parse_constant=env._reject_constant,
        )
        full = None if env.deeper_than(full, env.MAX_DEPTH) else full
    except (ValueError, RecursionError):
        full = None
    assert limit  # the guard is on in this interpreter
    assert env.clean_payload(body) == clean_json(full)
