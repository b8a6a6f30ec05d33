"""Rules over history (issue 16): the decision diff, "why not" per rule, lint from real traffic.

One seeded database for the module: a few hundred real-shaped deliveries (github issues and
pull requests, gitea label updates, cairn artifacts), stored through the real ingest
function in process, behind one shared server; then the MCP tools through a real client,
the CLI verbs once each through the script and their variations in process.
"""

from __future__ import annotations

import json
import random
import uuid
from pathlib import Path
from typing import Any

import pytest
from sbmcp import agent
from sbtest import CLI, Server
from sbworld import World, fixture_body, on_runtime

from switchboard.cli.send import build_request
from switchboard.service import rules as rules_svc
from switchboard.service.ingest import ingest
from switchboard.service.versions import config_hash
from switchboard.sources import Headers

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
ISSUES, PULLS, CLOSED, LABELS, ARTIFACTS = 90, 120, 30, 40, 30

SAVED: dict[str, Any] = {
    "rules": [
        {"id": "prs", "expr": '.kind == "pull_request"', "action": {"queue": "review"}},
        {"id": "closed", "expr": '.payload.action == "closed"', "action": {"drop": True}},
        # faults on everything but issues (no labels to read)
        {
            "id": "label-bug",
            "expr": '(.payload.issue.labels[0].name | ascii_downcase) == "bug"',
            "action": {"queue": "triage"},
        },
        {
            "id": "team",
            "expr": ".payload.repository.owner.login == $params.team",
            "action": {"queue": "inbox"},
        },
        # planted for lint: shadowed by "prs", never matching, only faulting
        {
            "id": "prs-opened",
            "expr": '.kind == "pull_request" and .payload.action == "opened"',
            "action": {"queue": "triage"},
        },
        {"id": "pushes", "expr": '.kind == "push"', "action": {"drop": True}},
        {"id": "broken", "expr": ".payload.nothing | ascii_downcase", "action": {"drop": True}},
    ],
    "default_action": None,
    "params": {"team": "nobody-here", "unused_knob": 3},
}


_body = fixture_body


@pytest.fixture(scope="module")
def seeded(module_server_factory: Any, module_dsn: str) -> dict[str, Any]:
    """alice's github webhook with rules over ~280 deliveries, her gitea and cairn ones, and
    mallory (another human) with an endpoint of her own."""
    srv: Server = module_server_factory(module_dsn)
    w = World(CLI(srv.env).fast(), prefix="h-", direct=True)
    w.human("alice")
    w.human("mallory")
    w.endpoint("alice", "owner", queues="inbox,review,triage", webhook_queues="inbox,review,triage")
    w.endpoint("mallory", "intruder")
    github = w.webhook("owner", "github")
    gitea = w.webhook("owner", "gitea")
    cairn = w.webhook("owner", "cairn")

    async def seed(rt: Any) -> dict[str, list[str]]:
        ids: dict[str, list[str]] = {
            "issue": [],
            "pull": [],
            "closed": [],
            "label": [],
            "artifact": [],
        }

        async def send(
            hook: dict[str, Any],
            source: str,
            body: bytes,
            event: str | None,
            extra: dict[str, str],
            bucket: str,
        ) -> None:
            data, headers = build_request(
                source, body, hook["signing_secret"].encode(), event, extra, source == "cairn"
            )
            token = hook["ingest_url"].rsplit("/", 1)[1]
            reply = await ingest(rt, token, Headers(headers), data, "application/json")
            assert reply.status == 202, reply.body
            ids[bucket].append(await _last_event(rt, hook["webhook_id"]))

        def number(n: int) -> Any:
            return lambda d: d.update(number=n)

        kinds = ["pull"] * PULLS + ["issue"] * ISSUES + ["closed"] * CLOSED
        random.Random(16).shuffle(kinds)
        for i, kind in enumerate(kinds):
            gh = {"X-GitHub-Delivery": str(uuid.uuid4())}
            if kind == "pull":
                await send(
                    github,
                    "github",
                    _body("github_pull_request_opened", number(i)),
                    "pull_request",
                    gh,
                    "pull",
                )
            else:

                def issue(d: dict[str, Any], i: int = i, kind: str = kind) -> None:
                    d["issue"]["number"] = i
                    d["action"] = "closed" if kind == "closed" else "opened"

                await send(
                    github, "github", _body("github_issues_opened", issue), "issues", gh, kind
                )
        for i in range(LABELS):
            await send(
                gitea,
                "gitea",
                _body("gitea_issues_label_updated", number(i)),
                "issues",
                {"X-Gitea-Delivery": str(uuid.uuid4())},
                "label",
            )
        for i in range(ARTIFACTS):

            def artifact(d: dict[str, Any], i: int = i) -> None:
                d["event_id"] = str(uuid.uuid4())
                d["data"]["id"] = f"art{i}"

            await send(
                cairn, "cairn", _body("cairn_artifact_created", artifact), None, {}, "artifact"
            )
        await rules_svc.set_rules(
            rt, None, github["webhook_id"], SAVED["rules"], SAVED["default_action"], SAVED["params"]
        )
        return ids

    ids = on_runtime(srv.env, seed)
    return {
        "server": srv,
        "world": w,
        "github": github,
        "gitea": gitea,
        "cairn": cairn,
        "ids": ids,
        "mcp": srv.base_url + "/mcp",
    }


async def _last_event(rt: Any, webhook_id: str) -> str:
    row = await rt.store.db.fetchone(
        "SELECT id FROM events WHERE webhook_id = %s ORDER BY received_at DESC, id DESC LIMIT 1",
        (webhook_id,),
    )
    return str(row["id"])


def _token(s: dict[str, Any], name: str = "owner") -> str:
    return str(s["world"].endpoints[name]["token"])


def _moved_prs() -> list[dict[str, Any]]:
    rules = json.loads(json.dumps(SAVED["rules"]))
    rules[0]["action"] = {"queue": "inbox"}
    return rules


async def test_a_candidate_moving_one_class_changes_exactly_those(seeded: Any) -> None:
    s = seeded
    hook = s["github"]["webhook_id"]
    total = ISSUES + PULLS + CLOSED
    async with agent(s["mcp"], _token(s)) as me:
        first = await me.call(
            "diff_webhook_rules",
            webhook_id=hook,
            rules=_moved_prs(),
            params=SAVED["params"],
            last=total,
        )
        # the whole window in one call: totals and the changed count cover every event
        assert first["evaluated"] == total and first["changed"] == PULLS
        assert len(first["changes"]) == 100 and "stopped" not in first
        assert "next_cursor" not in first and first["changes_cursor"]
        assert first["candidate_hash"].startswith("sha256:")
        assert first["window"]["last"] == total and first["window"]["newest"]
        second = await me.call(
            "diff_webhook_rules",
            webhook_id=hook,
            rules=_moved_prs(),
            params=SAVED["params"],
            changes_cursor=first["changes_cursor"],
        )
    # a page of changes alone: no totals, no cursor once the changes are all listed
    assert "changes_cursor" not in second and len(second["changes"]) == PULLS - 100
    assert "totals" not in second and second["candidate_hash"] == first["candidate_hash"]
    changes = first["changes"] + second["changes"]
    assert {c["event_id"] for c in changes} == set(s["ids"]["pull"])
    assert len({c["event_id"] for c in changes}) == PULLS
    one = changes[0]
    assert one["saved"]["queue"] == "review" and one["saved"]["rule_id"] == "prs"
    assert one["candidate"]["queue"] == "inbox" and one["candidate"]["rule_id"] == "prs"
    assert one["received_at"] and one["kind"] == "pull_request"
    saved, cand = first["totals"]["saved"], first["totals"]["candidate"]
    assert saved["queues"]["review"] == PULLS and cand["queues"].get("review", 0) == 0
    assert saved["drop"] == cand["drop"] == CLOSED
    assert saved["rules"]["label-bug"] == ISSUES


async def test_an_identical_candidate_changes_nothing_and_progress_arrives(seeded: Any) -> None:
    s = seeded
    hook = s["github"]["webhook_id"]
    seen: list[tuple[float, float | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total))

    async with agent(s["mcp"], _token(s)) as me:
        result = await me.session.call_tool(
            "diff_webhook_rules",
            {"webhook_id": hook, "rules": SAVED["rules"], "params": SAVED["params"], "since": "1h"},
            progress_callback=on_progress,
        )
    doc = result.structured_content
    assert doc is not None and not result.is_error
    assert doc["changed"] == 0 and doc["changes"] == [] and "next_cursor" not in doc
    assert doc["evaluated"] == ISSUES + PULLS + CLOSED
    assert doc["totals"]["saved"] == doc["totals"]["candidate"]
    # every event is decided before the faulting rules: no fault on the way
    assert doc["totals"]["saved"]["faults"] == {}
    assert doc["totals"]["saved"]["queues"] == {"review": PULLS, "triage": ISSUES}
    assert seen and seen[-1] == (ISSUES + PULLS + CLOSED, ISSUES + PULLS + CLOSED)


async def test_explain_shows_the_fault_and_the_later_verdicts(seeded: Any) -> None:
    s = seeded
    hook = s["github"]["webhook_id"]
    issue = s["ids"]["issue"][0]
    pull = s["ids"]["pull"][0]
    async with agent(s["mcp"], _token(s)) as me:
        on_issue = await me.call("explain_webhook_event", webhook_id=hook, event_id=issue)
        on_pull = await me.call("explain_webhook_event", webhook_id=hook, event_id=pull)
        sample = await me.call(
            "explain_webhook_event",
            webhook_id=hook,
            payload={"action": "closed"},
            headers={"X-GitHub-Event": "issues"},
        )
    verdicts = {v["id"]: v for v in on_issue["verdicts"]}
    assert [v["index"] for v in on_issue["verdicts"]] == list(range(len(SAVED["rules"])))
    assert verdicts["prs"]["verdict"] == "false" and verdicts["closed"]["verdict"] == "false"
    assert verdicts["label-bug"]["verdict"] == "matched"  # the fixture issue is labelled bug
    assert verdicts["team"] == {
        "index": 3,
        "id": "team",
        "verdict": "not_reached",
        "would": "false",
    }
    assert verdicts["broken"]["would"] == "error"
    assert on_issue["decision"]["queue"] == "triage"
    # on a pull request: prs matched, every later rule is not reached, with what it would say
    pv = {v["id"]: v for v in on_pull["verdicts"]}
    assert pv["prs"]["verdict"] == "matched"
    assert on_pull["decision"]["rule_id"] == "prs" and on_pull["decision"]["queue"] == "review"
    assert pv["label-bug"] == {
        "index": 2,
        "id": "label-bug",
        "verdict": "not_reached",
        "would": "error",
    }
    assert pv["prs-opened"]["would"] == "matched"
    # a sample whose label-bug faults, the later rules still judged
    sv = {v["id"]: v for v in sample["verdicts"]}
    assert sv["closed"]["verdict"] == "matched"
    assert sample["decision"]["drop"] is True
    on_fault = await _explain_candidate(s, hook, issue)
    fv = on_fault["verdicts"]
    assert fv[0]["verdict"] == "error" and fv[0]["cause"] == "error"
    assert "must be a string" in fv[0]["error"]
    assert [v["verdict"] for v in fv[1:]] == ["null", "matched"]
    assert on_fault["decision"]["rule_id"] == "c"
    assert on_fault["decision"]["faults"][0]["rule_id"] == "a"


async def _explain_candidate(s: Any, hook: str, event: str) -> dict[str, Any]:
    rules = [
        {"id": "a", "expr": ".payload.nothing | ascii_downcase", "action": {"drop": True}},
        {"id": "b", "expr": ".payload.nothing", "action": {"drop": True}},
        {"id": "c", "expr": ".payload.issue.number >= 0", "action": {"queue": "triage"}},
    ]
    async with agent(s["mcp"], _token(s)) as me:
        return await me.call("explain_webhook_event", webhook_id=hook, event_id=event, rules=rules)


async def test_lint_finds_the_planted_rules(seeded: Any) -> None:
    s = seeded
    hook = s["github"]["webhook_id"]
    async with agent(s["mcp"], _token(s)) as me:
        doc = await me.call("lint_webhook_rules", webhook_id=hook, last=1000)
    assert doc["evaluated"] == ISSUES + PULLS + CLOSED
    kinds = {(f["rule_id"], f["kind"]) for f in doc["findings"]}
    assert ("prs-opened", "shadowed") in kinds
    assert ("pushes", "never_matched") in kinds
    assert ("broken", "only_faults") in kinds
    assert ("team", "never_matched") in kinds
    assert (None, "unused_param") in kinds
    [unused] = [f for f in doc["findings"] if f["kind"] == "unused_param"]
    assert unused["param"] == "unused_knob"
    [shadow] = [f for f in doc["findings"] if f["kind"] == "shadowed"]
    assert shadow["shadowed_by"] == "prs" and "prs" in shadow["detail"]
    assert not {r for r, _ in kinds} & {"prs", "closed"}


async def test_another_humans_webhook_and_events_are_not_found(seeded: Any) -> None:
    s = seeded
    hook = s["github"]["webhook_id"]
    issue = s["ids"]["issue"][0]
    label = s["ids"]["label"][0]
    async with agent(s["mcp"], _token(s, "intruder")) as them:
        for tool, args in [
            ("diff_webhook_rules", {"webhook_id": hook, "rules": []}),
            ("explain_webhook_event", {"webhook_id": hook, "event_id": issue}),
            ("lint_webhook_rules", {"webhook_id": hook}),
        ]:
            failed = await them.fails(tool, **args)
            assert failed.code == "not_found", failed.text
    async with agent(s["mcp"], _token(s)) as me:
        # an event of another webhook (alice's own gitea one) is not found on this one
        failed = await me.fails("explain_webhook_event", webhook_id=hook, event_id=label)
        assert failed.code == "not_found"
        bad = await me.fails("diff_webhook_rules", webhook_id=hook, rules=[], last=5, since="1h")
        assert bad.code == "invalid_argument"
        bad = await me.fails("diff_webhook_rules", webhook_id=hook, cursor="nope")
        assert bad.code == "invalid_argument"
        # further back than any event can be: refused in the caller's terms, never internal
        for since in ("999999d", "99999999999999999999d", "0001-01-01T00:00:00+01:00"):
            for tool in ("diff_webhook_rules", "reroute_webhook_events", "release_held_events"):
                args = {"rules": []} if tool == "diff_webhook_rules" else {}
                bad = await me.fails(tool, webhook_id=hook, since=since, **args)
                assert bad.text == (
                    f"invalid_argument: since: at most 36500 days (100 years) back (got {since!r})"
                ), (tool, bad.text)
        refused = await me.fails(
            "diff_webhook_rules",
            webhook_id=hook,
            rules=[{"expr": "$ENV", "action": {"drop": True}}],
        )
        assert refused.code == "forbidden_function"


def test_cli_verbs(seeded: Any, tmp_path: Path) -> None:
    s = seeded
    cli = CLI(s["server"].env)
    hook = s["github"]["webhook_id"]
    candidate = tmp_path / "candidate.json"
    candidate.write_text(json.dumps({"rules": _moved_prs(), "params": SAVED["params"]}))
    # once each through the installed script
    diff = cli.json("rules", "diff", hook, str(candidate), "--last", "300")
    assert diff["changed"] == PULLS and len(diff["changes"]) == PULLS  # every page, merged
    assert diff["evaluated"] == ISSUES + PULLS + CLOSED and "next_cursor" not in diff
    explained = cli.json("rules", "explain", s["ids"]["closed"][0])
    assert explained["decision"]["drop"] is True
    assert [v["verdict"] for v in explained["verdicts"]][:2] == ["false", "matched"]
    lint = cli.json("rules", "lint", s["gitea"]["webhook_id"], "--last", "10")
    assert lint == {"webhook_id": s["gitea"]["webhook_id"], "evaluated": 0, "findings": []}
    # variations in process
    fast = cli.fast()
    table = fast.run("rules", "diff", hook, str(candidate), "--since", "1d", "--table")
    assert "changed events" in table.stdout and "review" in table.stdout
    capped_cfg = tmp_path / "capped.toml"
    capped_cfg.write_text("[plugins.rules]\nhistory_max_events = 50\n")
    capped = CLI({**s["server"].env, "SWITCHBOARD_CONFIG": str(capped_cfg)}).fast()
    doc = capped.json("rules", "diff", hook, str(candidate))
    assert doc["evaluated"] == 50 and doc["stopped"] == "max_events" and doc["next_cursor"]
    more = capped.json("rules", "diff", hook, str(candidate), "--cursor", doc["next_cursor"])
    assert more["evaluated"] == 50
    assert not {c["event_id"] for c in doc["changes"]} & {c["event_id"] for c in more["changes"]}
    # a policy-only candidate keeps the saved rules: its hash is the policy save's
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"on_fault": "hold"}))
    held = fast.json("rules", "diff", hook, str(policy), "--last", "20")
    assert held["evaluated"] == 20 and held["changed"] == 0
    saved = fast.json("webhook", "rules", "show", hook)
    keys = ("rules", "default_action", "params", "lanes")
    wanted = {**{k: saved[k] for k in keys if k in saved}, "on_fault": "hold"}
    assert held["candidate_hash"] == config_hash(wanted) != saved["config_hash"]
    lint_table = fast.run("rules", "lint", hook, "--table")
    assert "shadowed" in lint_table.stdout and "unused_param" in lint_table.stdout
    missing = fast.run("rules", "explain", str(uuid.uuid4()), check=False)
    assert missing.returncode == 1 and "not found" in missing.stderr
    for argv in (["rules", "diff", hook, str(candidate)], ["webhook", "reroute", hook, "--plan"]):
        far = fast.run(*argv, "--since", "999999d", check=False)
        assert far.returncode == 2 and far.stderr.count("\n") == 1, far.stderr
        assert "since: at most 36500 days (100 years) back" in far.stderr


async def test_the_cli_progress_bar_shows_rate_and_eta(monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import sys

    from switchboard_rules import history_cli

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    err = Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    async with history_cli._progress(True, "diff") as report:
        assert report is not None
        for done in (0, 100, 200):
            await report(done, 400, None)
    text = err.getvalue()
    assert "diff" in text and "200/400" in text and "events/s" in text and "ETA" in text
    async with history_cli._progress(False, "diff") as none:
        assert none is None


async def test_a_cancelled_diff_stops_and_the_sandbox_serves_the_next(
    seeded: Any, module_runtime: Any
) -> None:
    import asyncio

    from switchboard.service import history

    rt, hook = module_runtime, seeded["github"]["webhook_id"]
    sandbox = rt.registries.stages.get("rules").sandbox
    task = asyncio.ensure_future(
        history.diff_rules(rt, None, hook, rules=_moved_prs(), params=SAVED["params"], last=300)
    )
    for _ in range(2000):  # until a batch is in an evaluator
        if sandbox._pool.busy or task.done():
            break
        await asyncio.sleep(0.005)
    assert sandbox._pool.busy, "the diff never reached the sandbox"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not sandbox._pool.busy  # nothing left evaluating
    again = await history.diff_rules(
        rt, None, hook, rules=_moved_prs(), params=SAVED["params"], last=20
    )
    assert again["evaluated"] == 20


async def test_versions_and_guarded_saves_over_mcp(seeded: Any) -> None:
    """The version verbs through a real client; the saved config ends as it began."""
    s = seeded
    hook = s["github"]["webhook_id"]
    async with agent(s["mcp"], _token(s)) as me:
        now = (await me.call("list_webhook_rules", webhook_id=hook))["version"]
        diff = await me.call(
            "diff_webhook_rules", webhook_id=hook, rules=SAVED["rules"], params=SAVED["params"]
        )
        saved = await me.call(
            "set_webhook_rules",
            webhook_id=hook,
            rules=SAVED["rules"],
            params=SAVED["params"],
            expect_version=now,
            diffed=diff["candidate_hash"],
            note="same again",
        )
        assert saved["version"] == now + 1 and saved["config_hash"] == diff["candidate_hash"]
        stale = await me.fails("set_webhook_rules", webhook_id=hook, rules=[], expect_version=now)
        assert stale.code == "conflict" and f"version {now + 1}" in stale.text
        mismatch = await me.fails(
            "set_webhook_rules", webhook_id=hook, rules=[], diffed=diff["candidate_hash"]
        )
        assert mismatch.code == "diff_mismatch"
        listed = await me.call("list_rule_versions", webhook_id=hook, limit=1)
        assert listed["current_version"] == now + 1 and listed["next_cursor"]
        assert listed["versions"][0]["note"] == "same again"
        one = await me.call("get_rule_version", webhook_id=hook, version=now + 1)
        assert one["config"]["rules"] == saved["rules"]
        back = await me.call("rollback_webhook_rules", webhook_id=hook, version=now + 1)
        assert back["version"] == now + 2 and back["config_hash"] == saved["config_hash"]
        missing = await me.fails("get_rule_version", webhook_id=hook, version=now + 9)
        assert missing.code == "version_not_found"
        # a re-route's filters and a policy save's diff, over the real client
        plan = await me.call("reroute_webhook_events", webhook_id=hook, disposition="held")
        assert plan["evaluated"] == 0 and plan["events"] == [] and "candidate_hash" in plan
        bad = await me.fails("reroute_webhook_events", webhook_id=hook, event_ids=["nope"])
        assert "event_ids" in bad.text
        # an apply of the version planned, or nothing (a save may land between the two)
        assert plan["version"] == now + 2
        moved = await me.fails(
            "reroute_webhook_events",
            webhook_id=hook,
            disposition="held",
            plan=False,
            expect_version=now + 1,
        )
        assert moved.code == "conflict" and f"version {now + 2}, not {now + 1}" in moved.text
        kept = await me.fails(
            "release_held_events", webhook_id=hook, plan=False, expect_version=now + 1
        )
        assert kept.code == "conflict"
        policy = await me.call("diff_webhook_rules", webhook_id=hook, on_fault="hold", last=5)
        held = await me.call(
            "set_webhook_policy",
            webhook_id=hook,
            on_fault="hold",
            diffed=policy["candidate_hash"],
        )
        assert held["config_hash"] == policy["candidate_hash"]
        await me.call("rollback_webhook_rules", webhook_id=hook, version=now + 2)
