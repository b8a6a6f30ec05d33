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
