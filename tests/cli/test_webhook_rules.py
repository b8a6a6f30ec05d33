"""``switchboard webhook rules show|set|history|rollback``: an operator sees and changes a
webhook's live rules from the CLI, each change a version by ``operator``."""

from __future__ import annotations

import json
from pathlib import Path

from sbtest import CLI

from switchboard.runtime import Runtime
from switchboard.service import identity, rules, webhooks
from switchboard.service.ingest import ingest
from switchboard.sources import Headers


async def test_show_set_history_rollback(cli: CLI, runtime: Runtime, tmp_path: Path) -> None:
    rt = runtime
    await identity.add_human(rt, "alice")
    made = await identity.vend_endpoint(
        rt,
        owner="alice",
        name="router",
        queues=["inbox", "review"],
        webhook_queues=["inbox", "review"],
        source_types=["generic"],
        webhook_max=2,
    )
    owner = await identity.authenticate(rt, made["token"])
    hook = (await webhooks.create_webhook(rt, owner, "generic", "inbox"))["webhook_id"]
    await rules.set_rules(rt, owner, hook, [], params={"team": "a"})
    candidate = tmp_path / "rules.json"
    candidate.write_text(
        json.dumps({"rules": [{"id": "all", "expr": "true", "action": {"queue": "review"}}]})
    )

    real, fast = cli, cli.fast()
    shown = real.json("webhook", "rules", "show", hook)
    assert shown["version"] == 1 and shown["rules"] == [] and shown["params"] == {"team": "a"}
    saved = real.json("webhook", "rules", "set", hook, str(candidate), "--note", "all to review")
    assert saved["version"] == 2 and saved["rules"][0]["id"] == "all"
    assert saved["params"] == {"team": "a"}  # no params key: the stored ones are kept
    stale = fast.run(
        "webhook", "rules", "set", hook, str(candidate), "--expect-version", "1", check=False
    )
    assert stale.returncode == 1 and "version 2" in stale.stderr  # refused: a runtime error
    history = fast.json("webhook", "rules", "history", hook)
    assert [(v["version"], v["author"]) for v in history["versions"]] == [
        (2, "operator"),
        (1, str(owner["id"])),
    ]
    assert history["versions"][0]["note"] == "all to review"
    back = fast.json("webhook", "rules", "rollback", hook, "1", "--expect-version", "2")
    assert back["version"] == 3 and back["rules"] == []
    old = fast.json("webhook", "rules", "show", hook, "2")
    assert old["config"]["rules"][0]["id"] == "all" and old["author"] == "operator"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"rules": [], "rulez": 1}))
    refused = fast.run("webhook", "rules", "set", hook, str(bad), check=False)
    assert refused.returncode == 2 and "rulez" in refused.stderr  # a bad input file
    bad.write_text(
        json.dumps(
            {
                "rules": [
                    {"id": "r", "expr": "true", "action": {"queue": "review", "exclusive": "yes"}}
                ]
            }
        )
    )
    refused = fast.run("webhook", "rules", "set", hook, str(bad), check=False)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr.strip().endswith(
        "rule 0 (id r): action.exclusive must be a boolean (got a string)"
    )
    # The fault policy and lanes go in the same file, one version; left out, they are kept.
    policy = tmp_path / "policy.json"
    policy.write_text(
        json.dumps({"rules": [], "on_fault": "hold", "lanes": {"review": {"once_ttl_s": 600}}})
    )
    held = fast.json("webhook", "rules", "set", hook, str(policy))
    assert held["version"] == 4 and held["on_fault"] == "hold"
    assert held["lanes"] == {"review": {"once_ttl_s": 600}}
    kept = fast.json("webhook", "rules", "set", hook, str(candidate))
    assert kept["on_fault"] == "hold" and kept["lanes"] == held["lanes"]
    # So does the webhook's own event retention ([retention]); null inherits the server's.
    policy.write_text(json.dumps({"rules": [], "events_days": 90}))
    assert fast.json("webhook", "rules", "set", hook, str(policy))["events_days"] == 90
    assert fast.json("webhook", "rules", "set", hook, str(candidate))["events_days"] == 90
    policy.write_text(json.dumps({"rules": [], "events_days": None}))
    assert "events_days" not in fast.json("webhook", "rules", "set", hook, str(policy))


async def test_reroute_plan_then_apply(cli: CLI, runtime: Runtime) -> None:
    rt = runtime
    await identity.add_human(rt, "alice")
    made = await identity.vend_endpoint(
        rt,
        owner="alice",
        name="router",
        queues=["inbox", "review"],
        webhook_queues=["inbox", "review"],
        source_types=["generic"],
        webhook_max=2,
    )
    owner = await identity.authenticate(rt, made["token"])
    created = await webhooks.create_webhook(rt, owner, "generic", "inbox")
    hook = created["webhook_id"]
    await rules.set_rules(rt, owner, hook, [{"expr": "true", "action": {"drop": True}}])
    token = str(created["ingest_url"]).rsplit("/", 1)[1]
    for i in range(3):
        await ingest(rt, token, Headers({"X-Delivery-Id": f"c{i}"}), b"{}", None)
    await rules.set_rules(rt, owner, hook, [])
    fast = cli.fast()
    plan = fast.json("webhook", "reroute", hook, "--plan")
    assert plan["plan"] is True and plan["todos_planned"] == 3
    first = plan["events"][0]["event_id"]
    one = fast.json("webhook", "reroute", hook, "--plan", "--event-id", first)
    assert one["evaluated"] == 1 and [e["event_id"] for e in one["events"]] == [first]
    routed = fast.json("webhook", "reroute", hook, "--plan", "--disposition", "routed")
    assert routed["evaluated"] == 0
    bad = fast.run("webhook", "reroute", hook, "--plan", "--disposition", "lost", check=False)
    assert bad.returncode != 0 and "disposition" in bad.stderr
    done = cli.json("webhook", "reroute", hook, "--apply", "--last", "10")
    assert done["todos_created"] == 3 and done["changed"] == 3
    assert fast.json("webhook", "reroute", hook, "--apply")["todos_created"] == 0
    assert fast.run("webhook", "reroute", hook, check=False).returncode == 2
