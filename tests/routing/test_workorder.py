"""Subjects, once keys, exclusive delivery and work orders: the pure part of ADR-0025."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from switchboard.plugins import build_registries, make_plugin_manager
from switchboard.routing.decide import decide, default_decision
from switchboard.routing.model import Grant, MatchResult, RoutingConfig, Target
from switchboard.routing.trace import validate_trace
from switchboard.routing.workorder import (
    WORK_ORDER_AUTHORITY,
    once_key,
    subject_of,
    work_order,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GRANT = Grant(
    "inbox",
    ("inbox", "lane-m"),
    (Target("router", ("inbox",)), Target("m-1", ("lane-m",)), Target("m-2", ("lane-m",))),
)


def payload(name: str, **data: Any) -> Any:
    doc = json.loads((FIXTURES / f"{name}.json").read_bytes())
    if data:
        doc["data"] = {**doc["data"], **data}
    return doc


@pytest.fixture(scope="module")
def subjects() -> Any:
    return build_registries(make_plugin_manager()).subjects


def test_once_key_is_sha256_of_subject_nul_queue() -> None:
    expected = "once:" + hashlib.sha256(b"gitea:ops/backup#42\x00lane-m").hexdigest()
    assert once_key("gitea:ops/backup#42", "lane-m") == expected
    assert once_key("a", "bc") != once_key("ab", "c")
    assert once_key("gitea:ops/backup#42", "lane-l") != expected


@pytest.mark.parametrize(
    ("source", "kind", "fixture", "key"),
    [
        ("gitea", "issues", "gitea_issues_label_updated", "gitea:ops/backup#42"),
        ("github", "issues", "github_issues_opened", "github:acme/widgets#1347"),
        ("cairn", "artifact.created", "cairn_artifact_created", "cairn:a1b2c3d4e5"),
        ("github", "pull_request", "github_pull_request_opened", None),  # a PR is no issue
        ("github", "issues", "cairn_artifact_created", None),
    ],
)
def test_subjects_from_the_forge_and_cairn_plugins(
    subjects: Any, source: str, kind: str, fixture: str, key: str | None
) -> None:
    found = subject_of(subjects, source, kind, payload(fixture))
    assert (found or {}).get("key") == key


def test_cairn_subject_keeps_string_tags_only(subjects: Any) -> None:
    found = subject_of(
        subjects,
        "cairn",
        "artifact.created",
        payload("cairn_artifact_created", tags=["handoff", 7, {"x": 1}, "lane:m"]),
    )
    assert found is not None
    assert found == {
        "key": "cairn:a1b2c3d4e5",
        "type": "artifact",
        "id": "a1b2c3d4e5",
        "handle": "mcp://cairn/a1b2c3d4e5",
        "share_type": "markdown",
        "actor_id": "you@example.com",
        "on_behalf_of": "claude-code/2.1.0",
        "tags": ["handoff", "lane:m"],
        "title": "handoff: audit the backup job",
        "url": "https://cairn.stump.wtf/a1b2c3d4e5",
    }


def test_a_failing_extractor_is_no_subject() -> None:
    class Broken:
        name = "broken"

        def subject(self, source: str, kind: str | None, payload: Any) -> str:
            raise RuntimeError("bug")

    class Bare:
        name = "bare"

        def subject(self, source: str, kind: str | None, payload: Any) -> str:
            return "acme:T-1"

    assert subject_of([Broken()], "x", None, {}) is None
    assert subject_of([Broken(), Bare()], "x", None, {}) == {"key": "acme:T-1"}


def config(action: dict[str, Any]) -> RoutingConfig:
    return RoutingConfig(({"id": "r", "name": "lane", "expr": "true", "action": action},))


def test_exclusive_takes_the_first_target_in_order_that_drains_the_queue() -> None:
    d = decide(config({"queue": "lane-m", "exclusive": True}), MatchResult(0), GRANT)
    assert (d.queue, d.endpoints) == ("lane-m", ("m-1",))  # never the router: it cannot drain
    narrowed = decide(
        config({"queue": "lane-m", "exclusive": True, "endpoints": ["m-2"]}), MatchResult(0), GRANT
    )
    assert narrowed.endpoints == ("m-2",)
    plain = decide(config({"queue": "lane-m"}), MatchResult(0), GRANT)
    assert plain.endpoints == ("router", "m-1", "m-2")


def test_exclusive_with_no_drainer_takes_the_default_as_rule_not_granted() -> None:
    gone = Grant("inbox", GRANT.queues, (Target("router", ("inbox",)),))
    d = decide(config({"queue": "lane-m", "exclusive": True, "once": True}), MatchResult(0), gone)
    assert d.trace["cause"] == "rule_not_granted" and d.trace["rule_id"] == "r"
    assert d.queue == "inbox" and d.once is False  # the default's flags, not the rule's


def test_flags_travel_on_the_decision_and_its_trace() -> None:
    action = {"queue": "lane-m", "exclusive": True, "once": True, "work_order": True}
    d = decide(config(action), MatchResult(0), GRANT)
    assert (d.once, d.work_order) == (True, True) and d.trace["action"] == action
    default = default_decision(GRANT, {"queue": "inbox", "work_order": True})
    assert (default.once, default.work_order) == (False, True)


def test_work_order_shape() -> None:
    d = decide(
        config({"queue": "lane-m", "exclusive": True, "work_order": True}), MatchResult(0), GRANT
    )
    envelope = {"source": "gitea", "webhook_id": "w-1", "trust_mode": "signed", "verified": True}
    order = work_order(d, envelope, {"key": "gitea:o/r#1", "number": 1})
    assert order == {
        "version": 1,
        "lane": "lane-m",
        "source": "gitea",
        "webhook_id": "w-1",
        "trust_mode": "signed",
        "verified": True,
        "authorized_by": {"stage": "rule", "rule_id": "r", "rule_name": "lane"},
        "subject": {"key": "gitea:o/r#1", "number": 1},
        "authority": WORK_ORDER_AUTHORITY,
    }
    assert "subject" not in work_order(d, envelope, None)
    assert "grants no permission" in WORK_ORDER_AUTHORITY
    assert "prompt injection" in WORK_ORDER_AUTHORITY


def test_trace_schema_knows_the_once_fields() -> None:
    trace = {
        "stage": "rule",
        "rule_index": 0,
        "action": {"queue": "lane-m", "once": True},
        "once": "repeat",
        "once_key": once_key("s", "lane-m"),
    }
    validate_trace(trace)
    with pytest.raises(ValueError):
        validate_trace({**trace, "once": "maybe"})
    with pytest.raises(ValueError):
        validate_trace({**trace, "once_key": "once:xyz"})
