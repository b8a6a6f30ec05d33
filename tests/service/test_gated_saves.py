"""Gated saves and whole-window diffs (issue 36): with ``[routing] require_diff`` a save
needs a recent diff of its very candidate; one diff call counts the whole window."""

from __future__ import annotations

import json
from typing import Any

import pytest

from switchboard.errors import Conflict, InvalidArgument, NotFound
from switchboard.runtime import Runtime
from switchboard.service import history, identity, rules, webhooks
from switchboard.service.ingest import ingest
from switchboard.sources import Headers

CONFIG = "[routing]\nrequire_diff = true\nmin_diff_events = 50\n"

STORED = 1200
MOVING = [{"id": "thirds", "expr": ".payload.n % 3 == 0", "action": {"queue": "review"}}]


async def _webhook(rt: Runtime, deliveries: int) -> tuple[Any, str]:
    await identity.add_human(rt, "alice")
    made = await identity.vend_endpoint(
        rt,
        owner="alice",
        name="owner",
        queues=["inbox", "review"],
        webhook_queues=["inbox", "review"],
        source_types=["generic"],
        webhook_max=4,
    )
    owner = await rt.store.get_endpoint(made["endpoint_id"])
    created = await webhooks.create_webhook(rt, owner, "generic", "inbox")
    token = str(created["ingest_url"]).rsplit("/", 1)[1]
    for n in range(deliveries):
        body = json.dumps({"n": n}).encode()
        reply = await ingest(
            rt, token, Headers({"X-Delivery-Id": f"d-{n}"}), body, "application/json"
        )
        assert reply.status == 202, reply
    return owner, str(created["webhook_id"])


async def test_a_save_needs_a_diff_of_that_candidate_and_a_rollback_does_not(
    runtime: Runtime,
) -> None:
    owner, hook = await _webhook(runtime, 60)
    with pytest.raises(Conflict) as refused:
        await rules.set_rules(runtime, owner, hook, MOVING)
    assert refused.value.code == "diff_required"
    assert "diff_webhook_rules" in str(refused.value) and "50" in str(refused.value)
    # a diff too narrow does not count; one over enough deliveries does
    narrow = await history.diff_rules(runtime, owner, hook, rules=MOVING, last=10)
    with pytest.raises(Conflict):
        await rules.set_rules(runtime, owner, hook, MOVING)
    diff = await history.diff_rules(runtime, owner, hook, rules=MOVING, last=100)
    assert diff["evaluated"] == 60 and diff["changed"] == 20
    assert diff["candidate_hash"] == narrow["candidate_hash"]
    # another candidate was not diffed
    with pytest.raises(Conflict):
        await rules.set_rules(runtime, owner, hook, [])
    # diffed= names the hash of what is saved, else the save is refused
    with pytest.raises(InvalidArgument) as mismatch:
        await rules.set_rules(runtime, owner, hook, MOVING, diffed="sha256:other")
    assert mismatch.value.code == "diff_mismatch"
    saved = await rules.set_rules(runtime, owner, hook, MOVING, diffed=diff["candidate_hash"])
    assert saved["version"] == 1 and saved["config_hash"] == diff["candidate_hash"]
    # a stale diff no longer counts
    await runtime.store.db.fetchone(
        "UPDATE routing_diffs SET diffed_at = diffed_at - interval '2 hours' RETURNING 1"
    )
    with pytest.raises(Conflict):
        await rules.set_rules(runtime, owner, hook, MOVING)
    # every verb saves through the gate ...
    with pytest.raises(Conflict):
        await rules.remove_rule(runtime, owner, hook, "thirds")
    # ... but an undo is never held back: that config was live before
    back = await rules.rollback_rules(runtime, owner, hook, 1)
    assert back["version"] == 2
    with pytest.raises(NotFound):
        await rules.rollback_rules(runtime, owner, hook, 7)


async def test_one_diff_call_counts_the_whole_window(runtime: Runtime) -> None:
    owner, hook = await _webhook(runtime, STORED)
    doc = await history.diff_rules(runtime, owner, hook, rules=MOVING, last=1000)
    # the newest 1000 are n = 200..1199: 334 multiples of 3 among them
    moved = sum(1 for n in range(STORED - 1000, STORED) if n % 3 == 0)
    assert doc["evaluated"] == 1000 and doc["changed"] == moved
    assert "stopped" not in doc and "next_cursor" not in doc
    assert doc["totals"]["candidate"]["queues"] == {"review": moved, "inbox": 1000 - moved}
    assert doc["totals"]["saved"]["queues"] == {"inbox": 1000}
    assert doc["window"]["last"] == 1000
    seen = [c["event_id"] for c in doc["changes"]]
    pages = 1
    cursor = doc.get("changes_cursor")
    while cursor is not None:
        assert len(seen) == 100 * pages
        page = await history.diff_rules(runtime, owner, hook, rules=MOVING, changes_cursor=cursor)
        assert len(page["changes"]) <= 100 and "totals" not in page
        seen += [c["event_id"] for c in page["changes"]]
        cursor, pages = page.get("changes_cursor"), pages + 1
    assert pages == 4 and len(seen) == len(set(seen)) == moved
    with pytest.raises(InvalidArgument):
        await history.diff_rules(
            runtime, owner, hook, rules=MOVING, cursor=doc["changes_cursor"], changes_cursor="x"
        )


ID_LESS = [
    {"expr": ".payload.n % 3 == 0", "action": {"queue": "review"}},
    {"expr": ".payload.n % 3 == 0", "action": {"queue": "review"}},  # twins: two ids
]


async def test_a_gated_save_of_rules_without_ids_passes_after_their_diff(
    runtime: Runtime,
) -> None:
    owner, hook = await _webhook(runtime, 60)
    diff = await history.diff_rules(runtime, owner, hook, rules=ID_LESS, last=100)
    assert diff["changed"] == 20
    # the ids minted for the diff are the save's: the hashes agree, with or without diffed=
    saved = await rules.set_rules(runtime, owner, hook, ID_LESS, diffed=diff["candidate_hash"])
    assert saved["config_hash"] == diff["candidate_hash"]
    ids = [r["id"] for r in saved["rules"]]
    assert len(set(ids)) == 2 and all(i.startswith("rule_") and len(i) == 29 for i in ids)
    # add_webhook_rule without an id: its diff (the saved rules and the new one) gates it
    extra = {"expr": ".payload.n == 7", "action": {"drop": True}}
    with pytest.raises(Conflict):
        await rules.add_rule(runtime, owner, hook, **extra, position=0)
    candidate = [extra, *saved["rules"]]
    added = await history.diff_rules(runtime, owner, hook, rules=candidate, last=100)
    after = await rules.add_rule(runtime, owner, hook, **extra, position=0)
    assert after["config_hash"] == added["candidate_hash"] and after["version"] == 2
    assert [r["id"] for r in after["rules"]][1:] == ids


async def test_a_gated_save_with_lanes_passes_after_its_diff(runtime: Runtime) -> None:
    owner, hook = await _webhook(runtime, 60)
    lanes = {"review": {"once_ttl_s": 600}}
    with_lanes = await history.diff_rules(runtime, owner, hook, rules=MOVING, lanes=lanes, last=100)
    saved = await rules.set_rules(
        runtime, owner, hook, MOVING, lanes=lanes, diffed=with_lanes["candidate_hash"]
    )
    assert saved["lanes"] == lanes and saved["config_hash"] == with_lanes["candidate_hash"]
    # a later rules-only diff carries the saved lanes, as the rules-only save keeps them
    fewer = MOVING + [{"id": "sevens", "expr": ".payload.n == 7", "action": {"drop": True}}]
    diff = await history.diff_rules(runtime, owner, hook, rules=fewer, last=100)
    again = await rules.set_rules(runtime, owner, hook, fewer, diffed=diff["candidate_hash"])
    assert again["lanes"] == lanes and again["config_hash"] == diff["candidate_hash"]


async def test_a_policy_save_is_gated_and_diffable(runtime: Runtime) -> None:
    owner, hook = await _webhook(runtime, 60)
    with pytest.raises(Conflict) as refused:
        await rules.set_policy(runtime, owner, hook, on_fault="hold")
    assert refused.value.code == "diff_required" and "diff_webhook_rules" in str(refused.value)
    diff = await history.diff_rules(runtime, owner, hook, on_fault="hold", last=100)
    assert diff["evaluated"] == 60 and diff["changed"] == 0  # nothing faults here
    with pytest.raises(InvalidArgument) as mismatch:
        await rules.set_policy(runtime, owner, hook, on_fault="hold", diffed="sha256:other")
    assert mismatch.value.code == "diff_mismatch"
    saved = await rules.set_policy(
        runtime, owner, hook, on_fault="hold", diffed=diff["candidate_hash"]
    )
    assert saved["on_fault"] == "hold" and saved["config_hash"] == diff["candidate_hash"]
    # lanes alone, the same way
    lanes = {"inbox": {"once_ttl_s": 60}}
    lane_diff = await history.diff_rules(runtime, owner, hook, lanes=lanes, last=100)
    lane_save = await rules.set_policy(runtime, owner, hook, lanes=lanes)
    assert lane_save["config_hash"] == lane_diff["candidate_hash"]
    assert lane_save["on_fault"] == "hold"
    # retention alone routes nothing differently: not gated, no diff needed; with a
    # routing change beside it, gated again
    kept = await rules.set_policy(runtime, owner, hook, events_days=30)
    assert kept["events_days"] == 30 and kept["on_fault"] == "hold"
    with pytest.raises(Conflict) as again:
        await rules.set_policy(runtime, owner, hook, events_days=7, on_fault="default")
    assert again.value.code == "diff_required"
