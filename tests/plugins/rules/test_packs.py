"""The shipped rule packs on recorded Gitea, GitHub and Cairn deliveries, and without params.

Each case routes a producer's delivery (tests/fixtures, written from the producers'
documented formats) through the pack exactly as a dry run does: validated like a save
against a grant of lane endpoints, then evaluated in the sandbox.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from switchboard_rules import stage_of

from switchboard.config import load_config
from switchboard.plugin import Grant, RuleValidationError, Target, dry_run, sample_envelope
from switchboard.runtime import Runtime

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
LANE_QUEUES = ("lane-s", "lane-m", "lane-l", "lane-vision", "triage", "hold")
#: The ADR-0025 topology: a router owning the webhook (draining nothing it routes), then
#: one pool endpoint per lane, each scoped to exactly its lane's queue.
LANES_GRANT = Grant(
    "inbox",
    ("inbox", *LANE_QUEUES),
    (Target("router", ("inbox",)), *(Target(f"ep-{q}", (q,)) for q in LANE_QUEUES)),
)
POOL_GRANT = Grant("review", ("review",), (Target("pool", ("review",)),))

LANES_PARAMS = {
    "trusted_repos": ["ops/backup", "acme/widgets"],
    "trusted_actors": ["mara", "octocat", "you@example.com"],
}


def fixture(name: str, **changes: Any) -> tuple[str, bytes, dict[str, str]]:
    """(source, body, headers) of a recorded delivery, its body changed at dotted paths."""
    body = (FIXTURES / f"{name}.json").read_bytes()
    headers = json.loads((FIXTURES / f"{name}.headers.json").read_text())
    if changes:
        doc = json.loads(body)
        for path, value in changes.items():
            *parents, last = path.split("__")
            node = doc
            for key in parents:
                node = node[key]
            node[last] = value
        body = json.dumps(doc).encode()
    return name.split("_", 1)[0], body, headers


def labels(*names: str) -> list[dict[str, Any]]:
    return [{"id": i, "name": n, "color": "ededed"} for i, n in enumerate(names, 1)]


@asynccontextmanager
async def offline() -> AsyncIterator[Runtime]:
    """A runtime with every first-party plugin and no database; its sandbox closed after."""
    runtime = Runtime(load_config(env={}))
    try:
        yield runtime
    finally:
        await stage_of(runtime).close()


async def route(
    rt: Runtime, pack: str, params: Any, grant: Grant, delivery: tuple[str, bytes, dict[str, str]]
) -> dict[str, Any]:
    source, body, headers = delivery
    found = rt.registries.rule_packs.get(pack)
    assert found is not None
    config = {**found.config, "params": params}
    envelope = sample_envelope(
        rt.registries.projections,
        sources=rt.registries.sources,
        source=source,
        trust_mode="signed",
        webhook_id="w",
        body=body,
        headers=headers,
    )
    result = await dry_run([stage_of(rt)], config, envelope, grant)
    decision = result["decision"]
    where = "drop" if decision["drop"] else (decision["queue"], tuple(decision["endpoints"]))
    return {"where": where, "trace": result["trace"], "action": result["trace"]["action"]}


def lane(queue: str) -> tuple[str, tuple[str, ...]]:
    return (queue, (f"ep-{queue}",))


LANES_CASES = [
    ("gitea opened, unsized", fixture("gitea_issues_opened"), lane("triage")),
    ("gitea labelled, unsized", fixture("gitea_issues_label_updated"), lane("triage")),
    (
        "gitea size:m",
        fixture("gitea_issues_label_updated", issue__labels=labels("bug", "size:m")),
        lane("lane-m"),
    ),
    (
        "gitea size:s",
        fixture("gitea_issues_opened", issue__labels=labels("size:s")),
        lane("lane-s"),
    ),
    (
        "gitea vision",
        fixture("gitea_issues_opened", issue__labels=labels("size:vision")),
        lane("lane-vision"),
    ),
    (
        "gitea hold wins",
        fixture("gitea_issues_opened", issue__labels=labels("size:m", "hold")),
        lane("hold"),
    ),
    (
        "gitea closed",
        fixture(
            "gitea_issues_label_updated", issue__state="closed", issue__labels=labels("size:m")
        ),
        "drop",
    ),
    (
        "gitea other repo",
        fixture("gitea_issues_opened", repository__full_name="ops/secrets"),
        "drop",
    ),
    ("gitea untrusted sender", fixture("gitea_issues_opened", sender__login="mallory"), "drop"),
    ("github size:l label", fixture("github_issues_labeled"), lane("lane-l")),
    ("github opened", fixture("github_issues_opened"), lane("triage")),
    ("github pull request", fixture("github_pull_request_opened"), "drop"),
    ("cairn handoff lane:m", fixture("cairn_artifact_created"), lane("lane-m")),
    (
        "cairn handoff unsized",
        fixture("cairn_artifact_created", data__tags=["handoff"]),
        lane("triage"),
    ),
    ("cairn not a handoff", fixture("cairn_artifact_created", data__tags=["lane:m"]), "drop"),
    (
        "cairn other actor",
        fixture("cairn_artifact_created", data__actor_id="eve@example.com"),
        "drop",
    ),
    # on_behalf_of is whatever the client said: it never vouches for anyone
    (
        "cairn on_behalf_of",
        fixture(
            "cairn_artifact_created",
            data__actor_id="eve@example.com",
            data__on_behalf_of="you@example.com",
        ),
        "drop",
    ),
]


async def test_lanes_pack() -> None:
    async with offline() as rt:
        for label, delivery, expected in LANES_CASES:
            got = await route(rt, "lanes", LANES_PARAMS, LANES_GRANT, delivery)
            assert got["where"] == expected, (label, got["trace"])
            if expected != "drop":
                assert got["action"] == {
                    "queue": expected[0],
                    "exclusive": True,
                    "once": True,
                    "work_order": True,
                }, label


CAIRN = {"trusted_actors": ["you@example.com"]}


async def test_cairn_handoff_pack() -> None:
    async with offline() as rt:
        cases = [
            (fixture("cairn_artifact_created"), lane("lane-m")),
            (fixture("cairn_artifact_created", data__tags=["handoff", "lane:s"]), lane("lane-s")),
            (fixture("cairn_artifact_created", data__tags=["handoff"]), "drop"),
            (fixture("cairn_artifact_created", data__tags=["lane:m"]), "drop"),
            (fixture("cairn_artifact_created", data__actor_id="eve@example.com"), "drop"),
            (fixture("gitea_issues_opened"), "drop"),
        ]
        for delivery, expected in cases:
            got = await route(rt, "cairn-handoff", CAIRN, LANES_GRANT, delivery)
            assert got["where"] == expected, got["trace"]


POOL = ("review", ("pool",))


async def test_pool_review_pack() -> None:
    async with offline() as rt:
        gitea_request = fixture("gitea_pull_request_review_requested")  # joestump -> joestump-agent
        github_request = fixture("github_pull_request_review_requested")  # octocat -> kitt-bot
        cases = [
            ("joestump-agent", gitea_request, POOL),
            ("kitt", gitea_request, "drop"),  # addressed to another identity
            ("joestump", gitea_request, "drop"),  # its own pull request, not addressed to it
            ("kitt-bot", github_request, POOL),
            ("octocat", github_request, "drop"),
            ("kitt-bot", fixture("github_pull_request_opened"), POOL),  # hubot's PR: review it
            ("hubot", fixture("github_pull_request_opened"), "drop"),  # its own PR
            ("hubot", fixture("github_issues_opened"), POOL),  # not a review trigger
            ("hubot", fixture("cairn_artifact_created"), POOL),
        ]
        for identity, delivery, expected in cases:
            got = await route(rt, "pool-review", {"identity": identity}, POOL_GRANT, delivery)
            assert got["where"] == expected, (identity, got["trace"])


#: Params that are missing, or present with the wrong type: each pack must fail closed.
MISSING: list[tuple[str, Any]] = [("none", None), ("empty", {})]
MISTYPED = {
    "lanes": {"trusted_repos": "ops/backup", "trusted_actors": "mara"},
    "cairn-handoff": {"trusted_actors": "you@example.com"},
    "pool-review": {"identity": ["joestump-agent"]},
}


@pytest.mark.parametrize("pack", ["lanes", "cairn-handoff", "pool-review"])
async def test_every_pack_fails_closed_without_its_params(pack: str) -> None:
    async with offline() as rt:
        grant = POOL_GRANT if pack == "pool-review" else LANES_GRANT
        if pack == "pool-review":
            # review triggers are dropped; what never asks for a review still reaches the pool
            would_route = [
                fixture("gitea_pull_request_review_requested"),
                fixture("github_pull_request_review_requested"),
                fixture("github_pull_request_opened"),
            ]
            still = [fixture("github_issues_opened")]
        else:
            would_route = [d for _, d, e in LANES_CASES if e != "drop"]
            still = []
        for label, params in [*MISSING, ("mistyped", MISTYPED[pack])]:
            for delivery in would_route:
                got = await route(rt, pack, params, grant, delivery)
                assert got["where"] == "drop", (label, got["trace"])
                assert "faults" not in got["trace"], got["trace"]  # a decision, not an error
            for delivery in still:
                assert (await route(rt, pack, params, grant, delivery))["where"] == POOL


async def test_a_pack_needs_an_endpoint_draining_each_exclusive_lane() -> None:
    async with offline() as rt:
        found = rt.registries.rule_packs.get("lanes")
        assert found is not None
        no_vision = Grant(
            "inbox",
            LANES_GRANT.queues,
            tuple(t for t in LANES_GRANT.targets if t.endpoint_id != "ep-lane-vision"),
        )
        _, body, headers = fixture("gitea_issues_opened")
        envelope = sample_envelope(
            rt.registries.projections,
            sources=rt.registries.sources,
            source="gitea",
            trust_mode="signed",
            webhook_id="w",
            body=body,
            headers=headers,
        )
        with pytest.raises(RuleValidationError) as info:
            await dry_run([stage_of(rt)], found.config, envelope, no_vision)
        assert info.value.code == "not_granted" and info.value.rule_id == "lane-vision"


def test_packs_carry_queue_names_never_endpoint_ids() -> None:
    rt = Runtime(load_config(env={}))
    for pack in rt.registries.rule_packs:
        actions = [r["action"] for r in pack.config["rules"]]
        actions.append(pack.config.get("default_action") or {})
        assert not any("endpoints" in a for a in actions), pack.name
        assert "webhook_id" not in pack.config
