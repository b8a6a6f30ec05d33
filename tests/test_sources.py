"""Sources through the registry: ``send`` signs and dry runs identify for any source, built-in or not."""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import re
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from switchboard_cairn.source import parse_rfc3339

from switchboard.cli.main import main
from switchboard.cli.send import UsageError, build_request, configure, run
from switchboard.plugin import delivery_key
from switchboard.plugins import build_registries, make_plugin_manager
from switchboard.registry import ProjectionRegistry, SourceRegistry
from switchboard.routing.envelope import build_envelope
from switchboard.routing.replay import sample_envelope
from switchboard.sanitize import sanitize_headers
from switchboard.sources import (
    TRUST_SIGNED,
    Delivery,
    Headers,
    Identity,
    Verification,
    body_key,
    constant_time_equal,
    delivery_id_key,
    hmac_sha256_hex,
    identify,
    long_id_key,
)

SECRET = b"third-party-secret-0123456789abcdef"
ROOT = Path(__file__).resolve().parents[1]
HOST = ROOT / "switchboard"


class AcmeSource:
    """A third party's source: kind in the body's ``type``, id in ``X-Acme-Id``."""

    name = "acme"
    trust_mode = TRUST_SIGNED

    def identify(self, headers: Headers, body: bytes) -> Identity:
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None
        kind = doc.get("type") if isinstance(doc, dict) else None
        return Identity(
            kind=kind if isinstance(kind, str) else None,
            delivery_id=delivery_key(headers, ("X-Acme-Id",), body),
        )

    def verify(self, delivery: Delivery, secret: bytes | None, now: float) -> Verification:
        given = delivery.headers.get("X-Acme-Mac")
        if not secret or not constant_time_equal(hmac_sha256_hex(secret, delivery.body), given):
            return Verification(ok=False, detail="bad mac")
        found = self.identify(delivery.headers, delivery.body)
        return Verification(ok=True, verified=True, delivery_id=found.delivery_id, kind=found.kind)

    def prepare(self, body: bytes, *, stamp: bool, now: float | None = None) -> bytes:
        return body + b"\n" if stamp else body

    def sign(self, body: bytes, secret: bytes | None, kind: str | None) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "X-Acme-Id": "acme-1"}
        if secret:
            headers["X-Acme-Mac"] = hmac_sha256_hex(secret, body)
        return headers


class VerifyOnlySource:
    """A source with neither a producer side nor ``identify``."""

    name = "listener"
    trust_mode = TRUST_SIGNED

    def verify(self, delivery: Delivery, secret: bytes | None, now: float) -> Verification:
        return Verification(ok=True, verified=True)


def registry(*sources: Any) -> SourceRegistry:
    reg = SourceRegistry()
    reg.current_plugin = "third-party"
    for source in sources:
        reg.add(source)
    return reg


# --------------------------------------------------------------------------------------
# A third party's source gets send and dry runs for free
# --------------------------------------------------------------------------------------


def test_third_party_source_is_prepared_and_signed() -> None:
    sources = registry(AcmeSource(), VerifyOnlySource())
    body, headers = build_request(
        "acme", b'{"type":"widget.made"}', SECRET, None, [], stamp=True, sources=sources
    )
    assert body == b'{"type":"widget.made"}\n'  # the source's own prepare ran
    verdict = AcmeSource().verify(Delivery(Headers(headers), body), SECRET, 0.0)
    assert verdict.ok and verdict.kind == "widget.made" and verdict.delivery_id == "acme-1"


def test_send_command_signs_for_the_runtimes_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    posted: list[tuple[bytes, dict[str, str]]] = []

    def fake_post(url: str, body: bytes, headers: dict[str, str], timeout: float) -> Any:
        posted.append((body, headers))
        return 202, {"accepted": True}

    monkeypatch.setattr("switchboard.cli.send.post", fake_post)
    body_file = tmp_path / "widget.json"
    body_file.write_bytes(b'{"type":"widget.made"}')
    rt = SimpleNamespace(registries=SimpleNamespace(sources=registry(AcmeSource())))
    parser = argparse.ArgumentParser()
    configure(parser, rt)
    args = parser.parse_args(
        ["--url", "http://x/", "--source", "acme", "--secret", SECRET.decode(), str(body_file)]
    )
    assert asyncio.run(run(args, rt)) == 0
    ((body, headers),) = posted
    assert AcmeSource().verify(Delivery(Headers(headers), body), SECRET, 0.0).ok


def test_source_without_producer_side_is_refused() -> None:
    sources = registry(AcmeSource(), VerifyOnlySource())
    with pytest.raises(UsageError, match="'listener' cannot sign.*choose from acme"):
        build_request("listener", b"{}", SECRET, None, [], stamp=False, sources=sources)
    with pytest.raises(UsageError, match="'github' is not a registered source"):
        build_request("github", b"{}", SECRET, None, [], stamp=False, sources=sources)


def test_third_party_sample_dry_run_has_the_sources_kind() -> None:
    sources = registry(AcmeSource(), VerifyOnlySource())
    envelope = sample_envelope(
        ProjectionRegistry(), sources=sources, source="acme", trust_mode=TRUST_SIGNED,
        webhook_id="dry-run", body=b'{"type":"widget.made"}',
        # Forge headers mean nothing to this source: its identify decides.
        headers={"X-GitHub-Event": "issues"},
    )  # fmt: skip
    assert envelope["kind"] == "widget.made"
    assert envelope["verified"] is True  # a sample shows what a signed delivery would


def test_source_without_identify_has_no_sample_kind() -> None:
    sources = registry(VerifyOnlySource())
    envelope = sample_envelope(
        ProjectionRegistry(), sources=sources, source="listener", trust_mode=TRUST_SIGNED,
        webhook_id="dry-run", body=b"{}", headers={"X-GitHub-Event": "issues"}, verified=False,
    )  # fmt: skip
    assert envelope["kind"] is None and envelope["verified"] is False


# --------------------------------------------------------------------------------------
# A disabled source is not offered
# --------------------------------------------------------------------------------------


def test_send_refuses_a_disabled_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "sb.toml"
    config.write_text('disabled_plugins = ["gitea"]\n')
    body_file = tmp_path / "body.json"
    body_file.write_bytes(b"{}")
    argv = ["--config", str(config), "send", "--url", "http://127.0.0.1:9/",
            "--source", "gitea", "--secret", "s", str(body_file)]  # fmt: skip
    try:
        code = main(argv)
    except SystemExit as exc:  # refused by argparse: not among the choices
        code = exc.code
    assert code == 2
    out = capsys.readouterr()
    # Refused either as a choice argparse does not offer or by the command itself; both
    # name what can be chosen instead, and the disabled source is not among them.
    message = out.err if not out.out else json.loads(out.out)["error"]
    assert "'gitea'" in message
    offered = [name.strip("'") for name in message.rpartition("choose from ")[2]
               .strip().rstrip(")").split(", ")]  # fmt: skip
    assert "gitea" not in offered and "github" in offered


# --------------------------------------------------------------------------------------
# The receiver and a sample dry run agree, for every first-party source
# --------------------------------------------------------------------------------------

FIXTURES = [
    ("cairn", "cairn_artifact_created"),
    ("gitea", "gitea_issues_label_updated"),
    ("github", "github_issues_opened"),
    ("github", "github_pull_request_opened"),
    ("generic", "generic_alert"),
]


@pytest.fixture(scope="module")
def installed() -> Any:
    return build_registries(make_plugin_manager())


def _fixture_now(fixture: Any) -> float:
    # Cairn's fixture is only valid at its own created_at; the forges have no clock.
    created = json.loads(fixture.body).get("created_at")
    when = parse_rfc3339(created) if isinstance(created, str) else None
    return when.timestamp() if when is not None else 0.0


@pytest.mark.parametrize("signed", [True, False], ids=["signed", "unsigned-sample"])
@pytest.mark.parametrize("source_name,name", FIXTURES, ids=[n for _, n in FIXTURES])
def test_receiver_and_dry_run_agree(
    recorded: Callable[[str], Any], installed: Any, source_name: str, name: str,
    signed: bool,
) -> None:  # fmt: skip
    fixture = recorded(name)
    source = installed.sources.get(source_name)
    verdict = source.verify(fixture.delivery(), fixture.secret, _fixture_now(fixture))
    assert verdict.ok, verdict.detail
    # What the receiver builds (service/ingest.py), from the verified delivery...
    live = build_envelope(
        source=source_name, kind=verdict.kind, webhook_id="w", trust_mode=source.trust_mode,
        verified=verdict.verified, content_type=fixture.headers.get("Content-Type"),
        headers=sanitize_headers(Headers(fixture.headers)), body=fixture.body,
        projections=installed.projections,
    )  # fmt: skip
    # ...and what a dry run builds from a sample, usually pasted without its signature.
    headers = {k: v for k, v in fixture.headers.items() if signed or "signature" not in k.lower()}
    sample = sample_envelope(
        installed.projections, sources=installed.sources, source=source_name,
        trust_mode=source.trust_mode, webhook_id="w", body=fixture.body, headers=headers,
    )  # fmt: skip
    assert verdict.kind is not None or source_name == "generic"
    if signed:
        assert sample == live
    assert sample["kind"] == live["kind"] == verdict.kind
    assert identify(source, Headers(headers), fixture.body) == Identity(
        verdict.kind, verdict.delivery_id
    )


# --------------------------------------------------------------------------------------
# Kind and delivery id: one function per source, so verify() and identify() agree
# --------------------------------------------------------------------------------------

CREATED = "2026-09-11T17:04:05Z"
CAIRN_NOW = datetime.fromisoformat("2026-09-11T17:04:05+00:00").timestamp()
LONG_ID = "e" * 257


def _cairn_body(**fields: Any) -> bytes:
    doc = {"kind": "artifact.created", "event_id": "e-1", "created_at": CREATED, **fields}
    return json.dumps({k: v for k, v in doc.items() if v is not None}).encode()


def _signature(source: str, body: bytes) -> dict[str, str]:
    """Only the signature header each source checks, so the table's headers stay its own."""
    mac = hmac_sha256_hex(SECRET, body)
    return {
        "github": {"X-Hub-Signature-256": f"sha256={mac}"},
        "gitea": {"X-Gitea-Signature": mac},
        "cairn": {"X-Cairn-Signature": f"sha256={mac}"},
        "generic": {},
    }[source]


FORGE_BODY = b'{"action":"opened"}'
IDENTITY_CASES: list[tuple[str, str, dict[str, str], bytes, str | None, str | None]] = [
    # (id, source, headers, body, kind, delivery id; None = the body's hash)
    ("github event and delivery", "github",
     {"X-GitHub-Event": "issues", "X-GitHub-Delivery": "gh-1"}, FORGE_BODY, "issues", "gh-1"),
    ("github ignores gitea's headers", "github",
     {"X-Gitea-Event": "push", "X-Gitea-Delivery": "gt-1"}, FORGE_BODY, None, None),
    ("github over-long id", "github", {"X-GitHub-Delivery": LONG_ID}, FORGE_BODY, None,
     long_id_key(LONG_ID)),
    ("github bare", "github", {}, FORGE_BODY, None, None),
    ("gitea own headers first", "gitea",
     {"X-Gitea-Event": "issues", "X-Gitea-Delivery": "gt-1", "X-GitHub-Delivery": "gh-1"},
     FORGE_BODY, "issues", "gt-1"),
    ("gitea github-compatible headers", "gitea",
     {"X-GitHub-Event": "push", "X-GitHub-Delivery": "gh-1"}, FORGE_BODY, "push", "gh-1"),
    ("gitea over-long own id, usable github one", "gitea",
     {"X-Gitea-Delivery": LONG_ID, "X-GitHub-Delivery": "gh-1"}, FORGE_BODY, None, "gh-1"),
    ("gitea bare", "gitea", {}, FORGE_BODY, None, None),
    ("cairn body kind and event_id", "cairn", {"X-Cairn-Event": "header.kind"},
     _cairn_body(), "artifact.created", "e-1"),
    ("cairn body without kind", "cairn", {}, _cairn_body(kind=None), None, "e-1"),
    ("cairn over-long event_id", "cairn", {}, _cairn_body(event_id=LONG_ID),
     "artifact.created", long_id_key(LONG_ID)),
    ("generic producer headers", "generic",
     {"X-Delivery-Id": "d-1", "X-Cairn-Event": "artifact.created"},
     FORGE_BODY, "artifact.created", "d-1"),
    ("generic forge headers", "generic", {"Webhook-Id": "w-1", "X-GitHub-Event": "ping"},
     FORGE_BODY, "ping", "w-1"),
    ("generic every id over-long", "generic", {"X-Delivery-Id": LONG_ID, "Webhook-Id": "w" * 300},
     FORGE_BODY, None, long_id_key(LONG_ID)),
    ("generic bare", "generic", {}, FORGE_BODY, None, None),
]  # fmt: skip


@pytest.mark.parametrize(
    "source_name,headers,body,kind,delivery_id",
    [c[1:] for c in IDENTITY_CASES],
    ids=[c[0] for c in IDENTITY_CASES],
)
def test_verify_and_identify_report_the_same_kind_and_id(
    installed: Any, source_name: str, headers: dict[str, str], body: bytes,
    kind: str | None, delivery_id: str | None,
) -> None:  # fmt: skip
    source = installed.sources.get(source_name)
    expected = Identity(kind, delivery_id if delivery_id is not None else body_key(body))
    signed = Headers({**headers, **_signature(source_name, body)})
    verdict = source.verify(Delivery(signed, body), SECRET, CAIRN_NOW)
    assert verdict.ok, verdict.detail
    assert Identity(verdict.kind, verdict.delivery_id) == expected
    # A dry run's sample has no signature: identify() must not need one.
    assert source.identify(Headers(headers), body) == expected


def test_long_delivery_ids_stay_distinct_and_apart_from_body_keys() -> None:
    """An id over 256 bytes is keyed by its own hash: two such ids with the same body are
    two deliveries (the body's hash would merge them), one of them again is a redelivery."""
    body = b'{"ping": true}'
    a, b = "A" * 300, "B" * 300
    keys = [delivery_key(Headers({"X-Id": i}), ("X-Id",), body) for i in (a, b, a)]
    assert keys[0] != keys[1] and keys[0] == keys[2]
    assert keys[0].startswith("id-sha256:") and keys[0] != body_key(body)
    # an id that differs only by a byte PostgreSQL cannot hold is another id
    assert long_id_key(a + "\udcff") != long_id_key(a + "\udcfe") != long_id_key(a + "\\xfe")
    # precedence: the first usable id, else the first over-long one's hash, else none
    assert delivery_id_key([None, "", a, "short", b]) == "short"
    assert delivery_id_key(["", b, a]) == long_id_key(b)
    assert delivery_id_key([None, ""]) is None


@pytest.mark.parametrize("source_name", ["cairn", "gitea", "github", "generic"])
@pytest.mark.parametrize("body", [b"", b"\xff\xfe not json", b"[1]", b'{"kind": 7}'])
def test_identify_never_raises(installed: Any, source_name: str, body: bytes) -> None:
    found = installed.sources.get(source_name).identify(Headers({}), body)
    assert found == Identity(None, body_key(body))


# --------------------------------------------------------------------------------------
# The host names no first-party plugin
# --------------------------------------------------------------------------------------


#: The first-party source plugins and the package they share.
SOURCE_PLUGINS = ("cairn", "gitea", "github", "generic", "forge")


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) of every import in ``path``; relative ones are skipped."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.extend([(node.lineno, node.module)])
    return found


@pytest.mark.parametrize("plugin", SOURCE_PLUGINS)
def test_source_plugins_import_only_the_public_contract(plugin: str) -> None:
    package = ROOT / "plugins" / f"switchboard_{plugin}"
    own = f"switchboard_{plugin}"
    # A forge plugin may use the forge library; nothing else of another plugin.
    allowed_plugins = {own, "switchboard_forge"} if plugin in ("gitea", "github") else {own}
    files = sorted(package.rglob("*.py"))
    assert files
    offenders = []
    for path in files:
        for line, module in _imports(path):
            top = module.split(".")[0]
            if top == "switchboard" and module != "switchboard.plugin":
                offenders.append(f"{path.name}:{line}: {module}")
            elif top.startswith("switchboard_") and top not in allowed_plugins:
                offenders.append(f"{path.name}:{line}: {module}")
    assert offenders == []


def test_host_imports_no_first_party_plugin() -> None:
    pattern = re.compile(r"^\s*(from|import)\s+switchboard_(cairn|gitea|github|generic)\b", re.M)
    offenders = [
        str(path.relative_to(HOST.parent))
        for path in sorted(HOST.rglob("*.py"))
        if pattern.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []


def test_a_sources_projections_follow_registration_though_kept() -> None:
    from switchboard.plugin import Projection

    def build(source: str, kind: str | None, payload: Any) -> dict[str, Any]:
        return {}

    reg = ProjectionRegistry()
    first = reg.add(Projection(name="one", sources=("acme", "other"), keys=("k",), build=build))
    assert reg.for_source("acme") == [first]
    listed = reg.for_source("acme")
    listed.append(first)  # the caller's own list: what is kept does not change
    assert reg.for_source("acme") == [first]
    second = reg.add(Projection(name="two", sources=("acme",), keys=("k",), build=build))
    assert reg.for_source("acme") == [first, second]  # a later registration is seen
    assert reg.for_source("other") == [first] and reg.for_source("none") == []
