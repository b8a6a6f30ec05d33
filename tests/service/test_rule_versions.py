"""Rule versions (issue 36): every save numbered with its author, listed, fetched and rolled
back; ``expect_version`` as optimistic concurrency between two agents."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from switchboard.errors import Conflict, InvalidArgument, NotFound
from switchboard.logsetup import FIELDS
from switchboard.runtime import Runtime
from switchboard.service import identity, packs, rules, versions, webhooks


async def _owner(rt: Runtime, human: str = "alice", name: str = "owner") -> Any:
    try:
        await rt.store.get_human(human)
    except NotFound:
        await identity.add_human(rt, human)
    made = await identity.vend_endpoint(
        rt,
        owner=human,
        name=name,
        queues=["inbox", "review"],
        webhook_queues=["inbox", "review"],
        source_types=["generic"],
        webhook_max=4,
    )
    return await rt.store.get_endpoint(made["endpoint_id"])


def _rule(n: int) -> list[dict[str, Any]]:
    return [{"id": f"r{n}", "expr": f".payload.n == {n}", "action": {"queue": "review"}}]


async def test_ten_saves_then_a_rollback_to_version_3(
    runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    owner = await _owner(runtime)
    hook = (await webhooks.create_webhook(runtime, owner, "generic", "inbox"))["webhook_id"]
    assert (await rules.list_rules(runtime, owner, hook))["version"] == 0
    caplog.set_level(logging.INFO, logger="switchboard.rules")
    for n in range(1, 11):
        saved = await rules.set_rules(runtime, owner if n % 2 else None, hook, _rule(n))
        assert saved["version"] == n
    third = await versions.get_version(runtime, owner, hook, 3)
    assert third["config"]["rules"][0]["id"] == "r3" and third["author"] == str(owner["id"])
    back = await rules.rollback_rules(runtime, None, hook, 3)
    assert back["version"] == 11
    assert back["config_hash"] == third["config_hash"]
    listed = await rules.list_rules(runtime, owner, hook)
    assert {k: listed[k] for k in ("rules", "default_action", "params")} == third["config"]
    history = await versions.list_versions(runtime, owner, hook, limit=100)
    assert [v["version"] for v in history["versions"]] == list(range(11, 0, -1))
    authors = {v["version"]: v["author"] for v in history["versions"]}
    assert authors[1] == str(owner["id"]) and authors[2] == "operator" and authors[11] == "operator"
    assert history["versions"][0]["note"] == "rollback to version 3"
    lines = [
        f
        for f in (getattr(r, FIELDS, {}) for r in caplog.records)
        if f.get("event") == "rules_saved"
    ]
    assert len(lines) == 11
    assert [f["version"] for f in lines] == list(range(1, 12))
    assert lines[-1] == {
        "event": "rules_saved",
        "webhook_id": hook,
        "version": 11,
        "author": "operator",
        "config_hash": third["config_hash"],
        "rule_count": 1,
    }


async def test_every_verb_and_a_pack_install_is_a_version(runtime: Runtime) -> None:
    owner = await _owner(runtime)
    hook = (await webhooks.create_webhook(runtime, owner, "generic", "inbox"))["webhook_id"]
    await rules.add_rule(runtime, owner, hook, expr="true", action={"queue": "review"}, id="a")
    await rules.update_rule(runtime, owner, hook, "a", name="all")
    await rules.add_rule(runtime, owner, hook, expr="false", action={"drop": True}, id="b")
    await rules.move_rule(runtime, owner, hook, "b", 0)
    await rules.remove_rule(runtime, owner, hook, "a")
    names = [
        n
        for n in runtime.registries.rule_packs.names()
        if all(
            "queue" not in (r.get("action") or {}) or r["action"]["queue"] in ("inbox", "review")
            for r in runtime.registries.rule_packs.get(n).config.get("rules") or []
        )
    ]
    for name in names[:1]:
        await packs.install_pack(runtime, owner, hook, name)
    history = await versions.list_versions(runtime, owner, hook)
    assert history["current_version"] == 5 + len(names[:1]) == len(history["versions"])


async def test_versions_page_and_stay_with_their_owner(runtime: Runtime) -> None:
    owner = await _owner(runtime)
    mallory = await _owner(runtime, "mallory", "intruder")
    hook = (await webhooks.create_webhook(runtime, owner, "generic", "inbox"))["webhook_id"]
    for n in range(5):
        await rules.set_rules(runtime, owner, hook, _rule(n), note=f"step {n}")
    first = await versions.list_versions(runtime, owner, hook, limit=2)
    assert [v["version"] for v in first["versions"]] == [5, 4]
    assert "config" not in first["versions"][0] and first["versions"][0]["note"] == "step 4"
    second = await versions.list_versions(
        runtime, owner, hook, limit=2, cursor=first["next_cursor"]
    )
    third = await versions.list_versions(
        runtime, owner, hook, limit=2, cursor=second["next_cursor"]
    )
    assert [v["version"] for v in second["versions"] + third["versions"]] == [3, 2, 1]
    assert "next_cursor" not in third
    with pytest.raises(NotFound):
        await versions.list_versions(runtime, mallory, hook)
    with pytest.raises(NotFound):
        await versions.get_version(runtime, mallory, hook, 1)
    with pytest.raises(NotFound):
        await rules.rollback_rules(runtime, mallory, hook, 1)
    with pytest.raises(NotFound) as missing:
        await versions.get_version(runtime, owner, hook, 9)
    assert missing.value.code == "version_not_found"
    for bad in (0, -1, True, "2"):
        with pytest.raises(InvalidArgument):
            await versions.get_version(runtime, owner, hook, bad)
    with pytest.raises(InvalidArgument):
        await versions.list_versions(runtime, owner, hook, cursor="nonsense")


async def test_a_rollback_is_validated_against_todays_grant(runtime: Runtime) -> None:
    owner = await _owner(runtime)
    hook = (await webhooks.create_webhook(runtime, owner, "generic", "inbox"))["webhook_id"]
    await rules.set_rules(runtime, owner, hook, _rule(1))  # routes to "review"
    await rules.set_rules(runtime, owner, hook, [])
    await runtime.store.db.fetchone(
        "UPDATE endpoints SET scope_queues = '{inbox}', webhook_queues = '{inbox}'"
        " WHERE id = %s RETURNING id",
        (owner["id"],),
    )
    with pytest.raises(InvalidArgument):
        await rules.rollback_rules(runtime, owner, hook, 1)
    assert (await versions.list_versions(runtime, owner, hook))["current_version"] == 2


async def test_expect_version_lets_one_of_two_racing_agents_win(runtime: Runtime) -> None:
    owner = await _owner(runtime)
    other = await _owner(runtime, "alice", "second-agent")
    hook = (await webhooks.create_webhook(runtime, owner, "generic", "inbox"))["webhook_id"]
    await rules.set_rules(runtime, owner, hook, _rule(0))
    for rnd in range(5):
        seen = (await rules.list_rules(runtime, owner, hook))["version"]
        results = await asyncio.gather(
            rules.set_rules(runtime, owner, hook, _rule(100 + rnd), expect_version=seen),
            rules.set_rules(runtime, other, hook, _rule(200 + rnd), expect_version=seen),
            return_exceptions=True,
        )
        won = [r for r in results if isinstance(r, dict)]
        lost = [r for r in results if isinstance(r, Conflict)]
        assert len(won) == 1 and len(lost) == 1, results
        assert won[0]["version"] == seen + 1
        assert f"version {seen + 1}" in str(lost[0]) and lost[0].code == "conflict"
    # An expected version that matches saves; a stale one never does.
    assert (await rules.set_rules(runtime, owner, hook, [], expect_version=6))["version"] == 7
    with pytest.raises(Conflict):
        await rules.set_rules(runtime, owner, hook, [], expect_version=6)
    with pytest.raises(Conflict):
        await rules.rollback_rules(runtime, owner, hook, 1, expect_version=3)
    with pytest.raises(InvalidArgument):
        await rules.set_rules(runtime, owner, hook, [], expect_version=-1)


async def test_a_listing_never_labels_rules_with_another_version(runtime: Runtime) -> None:
    """The rules, their version and the version history are each read in one snapshot,
    however saves commit between a reader's reads. Read apart, a save landing between the
    rules and the version number labelled the old rules with the new number: a client
    editing them with that ``expect_version`` would silently undo the save."""
    owner = await _owner(runtime)
    hook = (await webhooks.create_webhook(runtime, owner, "generic", "inbox"))["webhook_id"]
    saves = 40
    done = asyncio.Event()

    async def save() -> None:
        try:
            for n in range(1, saves + 1):
                await rules.set_rules(runtime, owner, hook, _rule(n))
        finally:
            done.set()

    async def read() -> int:
        reads = 0
        while not done.is_set():
            listed = await rules.list_rules(runtime, owner, hook)
            # each save n holds rule r<n>: the rules shown are the version's own
            ids = [r["id"] for r in listed["rules"]]
            assert ids == ([f"r{listed['version']}"] if listed["version"] else []), listed
            page = await versions.list_versions(runtime, owner, hook, limit=1)
            newest = [v["version"] for v in page["versions"]]
            assert newest == ([page["current_version"]] if page["current_version"] else [])
            reads += 1
        return reads

    _, *reads = await asyncio.gather(save(), read(), read(), read())
    assert min(reads) > 5  # the readers really ran beside the saves
    assert (await rules.list_rules(runtime, owner, hook))["version"] == saves
