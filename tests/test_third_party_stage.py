"""A third party's routing stage (tests/plugins/sentrylevel), installed like a package: it
decides, passes and misbehaves in every way a stage can, through the live receiver, the
MCP dry run and /metrics, and no delivery is lost; the history verbs (explain, diff, lint,
their CLI and the console) replay it before the rules and agree with every stored trace.

One server and one set of deliveries for the module (``delivered``)."""

from __future__ import annotations

import html
import json
import re
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sbmcp import agent
from sbtest import CLI, install_distribution
from sbworld import World

SENTRY = Path(__file__).resolve().parent / "plugins" / "sentrylevel"
STAGE = "sentry_level"

#: level -> (stage, cause, the one fault's cause, its detail starts with; None: no fault)
EXPECTED: dict[str, tuple[str, str | None, str | None, str | None]] = {
    "fatal": (STAGE, None, None, None),
    "debug": (STAGE, None, None, None),
    "info": ("default", "no_match_default", None, None),
    "raise": (
        "default",
        "stage_error",
        "stage_error",
        "raised RuntimeError: the level table is not loaded",
    ),
    "garbage": ("default", "stage_error", "stage_error", "returned dict, not a StageResult"),
    "badtrace": (
        "default",
        "stage_error",
        "stage_error",
        "wrote an invalid routing trace at sentry_level/level: 5 is not of type 'string'",
    ),
    "badkey": (
        "default",
        "stage_error",
        "stage_error",
        "wrote trace key 'sentry': a stage's own detail goes under its name ('sentry_level')",
    ),
    "badfault": (
        "default",
        "stage_error",
        "stage_error",
        "reported an invalid fault at cause: 'level_unknown' is not one of",
    ),
    # passes with a fault of its own (Fault.of_stage): the stages after it decide
    "stale": ("default", "no_match_default", "stage_error", "the level table is stale"),
    "slow": ("default", "stage_timeout", "stage_timeout", "no answer within 400 ms"),
}
#: The levels whose stage fault is counted (misbehaved, or reported its own fault).
MISBEHAVING = [level for level, want in EXPECTED.items() if want[2] is not None]


@pytest.fixture(scope="module")
def sentry_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("sentrylevel")
    try:
        yield install_distribution(SENTRY, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _samples(url: str, name: str) -> Counter[tuple[tuple[str, str], ...]]:
    """``name``'s samples on /metrics, by their sorted labels."""
    text = httpx.get(url, timeout=10).text
    found: Counter[tuple[tuple[str, str], ...]] = Counter()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                found[tuple(sorted(s.labels.items()))] += int(s.value)
    return found


def _stage_errors(url: str) -> float:
    return _samples(url, "switchboard_stage_errors_total")[(("stage", STAGE),)]


def _outcomes(url: str) -> Counter[tuple[tuple[str, str], ...]]:
    return _samples(url, "switchboard_routing_outcomes_total")


@pytest.fixture(scope="module")
def delivered(
    sentry_site: Path,
    module_server_factory: Any,
    module_dsn: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:
    """The server with ``sentry_level`` before ``rules``, and one delivery per level,
    stored: ``stored[level] = (event_id, trace, disposition)``."""
    config = tmp_path_factory.mktemp("sentry-config") / "sb.toml"
    config.write_text(f'[routing]\nstages = ["{STAGE}", "rules"]\nstage_timeout_ms = 400\n')
    srv = module_server_factory(
        module_dsn, config=config, env_extra={"PYTHONPATH": str(sentry_site)}
    )
    listed = {p["name"]: p for p in CLI(srv.env).json("plugins")}
    assert listed[STAGE]["distribution"] == "switchboard-sentrylevel"
    w = World(CLI(srv.env))
    w.human("alice")
    owner = w.endpoint(
        "alice", "owner", queues="inbox,urgent", webhook_queues="inbox,urgent", sources="generic"
    )
    hook = w.webhook("owner", "generic")
    wid = hook["webhook_id"]
    before = _stage_errors(srv.base_url + "/metrics")
    outcomes = _outcomes(srv.base_url + "/metrics")

    bodies = {level: json.dumps({"level": level, "n": n}) for n, level in enumerate(EXPECTED)}
    for level, body in bodies.items():
        resp = httpx.post(
            hook["ingest_url"],
            content=body,
            headers={"Content-Type": "application/json", "X-Delivery-Id": f"d-{level}"},
            timeout=30,
        )
        assert resp.status_code == 202, (level, resp.text)

    with psycopg.connect(module_dsn) as conn:
        rows = conn.execute(
            "SELECT id, body, routing_trace, disposition FROM events WHERE webhook_id = %s",
            (wid,),
        ).fetchall()
    stored = {json.loads(bytes(r[1]))["level"]: (str(r[0]), r[2], r[3]) for r in rows}
    return {
        "server": srv,
        "world": w,
        "owner": owner,
        "hook": hook,
        "wid": wid,
        "bodies": bodies,
        "stored": stored,
        "before": before,
        "outcomes": outcomes,
    }


async def test_a_third_party_stage_decides_passes_and_misbehaves_without_losing_a_delivery(
    delivered: dict[str, Any],
) -> None:
    d = delivered
    srv, owner, wid, bodies, stored = d["server"], d["owner"], d["wid"], d["bodies"], d["stored"]
    before = d["before"]
    assert sorted(stored) == sorted(EXPECTED)  # every delivery stored, once

    for level, (stage, cause, fault, detail) in EXPECTED.items():
        _, trace, disposition = stored[level]
        assert trace["stage"] == stage, (level, trace)
        assert trace.get("cause") == cause, (level, trace)
        if fault is None:
            assert "faults" not in trace, (level, trace)
        else:
            (only,) = trace["faults"]
            assert only["stage"] == STAGE and only["cause"] == fault, (level, trace)
            assert only["detail"].startswith(detail), (level, only)
            assert trace["action"] == {"queue": "inbox"}  # the default
        assert disposition == ("dropped" if level == "debug" else "routed"), level
    assert stored["fatal"][1] == {
        "stage": STAGE,
        "action": {"queue": "urgent"},
        STAGE: {"level": "fatal"},
    }
    # A fault the stage reported of itself (Fault.of_stage) while passing: kept, and the
    # rules after it still decided (here: no rule, the default).
    assert stored["stale"][1] == {
        "stage": "default",
        "cause": "no_match_default",
        "action": {"queue": "inbox"},
        "faults": [{"stage": STAGE, "cause": "stage_error", "detail": "the level table is stale"}],
    }

    # The dry run takes the same path: every payload reports what was stored, and each
    # stored event replays to its own trace.
    async with agent(srv.base_url + "/mcp", owner["token"]) as me:
        for level, body in bodies.items():
            sample = await me.call(
                "test_webhook_rules",
                webhook_id=wid,
                payload=body,
                headers={"X-Delivery-Id": f"d-{level}"},
            )
            assert sample["trace"] == stored[level][1], level
            replay = await me.call("test_webhook_rules", webhook_id=wid, event_id=stored[level][0])
            assert replay["trace"] == stored[level][1], level

    # Counted by the stage's name, live deliveries only (dry runs move no counter).
    assert _stage_errors(srv.base_url + "/metrics") - before == len(MISBEHAVING)
    # Each outcome by the deciding stage's name (or default), its cause and first fault.
    moved = _outcomes(srv.base_url + "/metrics")
    moved.subtract(d["outcomes"])
    want: Counter[tuple[tuple[str, str], ...]] = Counter()
    for level, (stage, cause, fault, _) in EXPECTED.items():
        dropped = level == "debug"
        labels = {
            "stage": stage,
            "cause": cause or ("drop" if dropped else "none"),
            "disposition": "dropped" if dropped else "routed",
            "fault": fault or "none",
        }
        want[tuple(sorted(labels.items()))] += 1
    assert +moved == want
    assert (
        want[(("cause", "none"), ("disposition", "routed"), ("fault", "none"), ("stage", STAGE))]
        == 1
    )
    log = srv.log.read_text()
    assert "Traceback" not in log
    # Each delivery's log line names the stage that decided, or the one that failed.
    lines = [json.loads(x) for x in log.splitlines() if x.startswith("{")]
    by_event = {x["event_id"]: x for x in lines if x.get("logger") == "switchboard.delivery"}
    for level, (stage, _, fault, _) in EXPECTED.items():
        line = by_event[stored[level][0]]
        assert line["stage"] == stage, (level, line)
        assert line.get("failed_stages") == ([STAGE] if fault else None), (level, line)


#: What the stage said on each level's delivery, live: decided, passed or faulted.
SAID = {
    level: "faulted"
    if want[1] in ("stage_error", "stage_timeout")
    else ("passed" if want[0] == "default" else "decided")
    for level, want in EXPECTED.items()
}
#: The levels the stage passed to the rules (with or without a fault of its own).
PASSED = [level for level, said in SAID.items() if said == "passed"]
#: A candidate whose one rule matches everything: it can only decide what the stage passed.
EVERYTHING = [{"id": "all", "expr": "true", "action": {"drop": True}}]


async def test_explain_and_diff_replay_the_stage_before_the_rules_as_live_routing_did(
    delivered: dict[str, Any],
) -> None:
    d = delivered
    wid, stored = d["wid"], d["stored"]
    async with agent(d["server"].base_url + "/mcp", d["owner"]["token"]) as me:
        for level, (event_id, trace, _) in stored.items():
            doc = await me.call("explain_webhook_event", webhook_id=wid, event_id=event_id)
            assert doc["trace"] == trace, level  # the replay is what was stored
            assert [(s["stage"], s["said"]) for s in doc["stages"]] == [
                (STAGE, SAID[level]),
                ("rules", "passed" if SAID[level] == "passed" else "not_reached"),
            ], level
            decided_by = STAGE if SAID[level] == "decided" else "default"
            assert doc["decision"]["decided_by"] == decided_by, level
            if SAID[level] == "faulted":
                assert doc["stages"][0]["fault"] == trace["faults"][0], level
            if level == "stale":  # passed, saying its own fault
                assert doc["stages"][0]["faults"] == trace["faults"], doc["stages"]
            if SAID[level] == "decided":
                assert doc["stages"][0]["decision"]["trace"] == trace, level
            # with a rule matching everything: the rules only decide what the stage passed,
            # and no rule "matched" a delivery the stage decided or faulted on
            cand = await me.call(
                "explain_webhook_event", webhook_id=wid, event_id=event_id, rules=EVERYTHING
            )
            [verdict] = cand["verdicts"]
            if SAID[level] == "passed":
                assert verdict["verdict"] == "matched" and cand["decision"]["rule_id"] == "all"
                assert cand["decision"]["decided_by"] == "rules" and cand["decision"]["drop"]
            else:
                assert verdict == {
                    "index": 0,
                    "id": "all",
                    "verdict": "not_reached",
                    "would": "matched",
                    "decided_by": STAGE,
                }, level
                assert cand["trace"] == trace, level

        # the saved config over history: exactly the stored outcomes, the stage's drop counted
        same = await me.call("diff_webhook_rules", webhook_id=wid, rules=[])
        assert same["evaluated"] == len(EXPECTED) and same["changed"] == 0
        saved = same["totals"]["saved"]
        assert saved == same["totals"]["candidate"]
        assert saved["drop"] == sum(1 for _, _, disp in stored.values() if disp == "dropped") == 1
        assert saved["stages"] == {STAGE: 2, "default": len(EXPECTED) - 2}
        assert saved["queues"] == {"urgent": 1, "inbox": len(EXPECTED) - 2}
        assert saved["faults"] == {"stage_error": len(MISBEHAVING) - 1, "stage_timeout": 1}
        assert saved["rules"] == {} and "not_reasked" not in same  # nothing stored-only
        # a re-route decides through the same replay: the stage's urgent event stays put
        plan = await me.call("reroute_webhook_events", webhook_id=wid)
        assert plan["totals"] == saved and plan["changed"] == 0 and plan["events"] == []

        diff = await me.call("diff_webhook_rules", webhook_id=wid, rules=EVERYTHING)
    assert diff["evaluated"] == len(EXPECTED) and diff["changed"] == len(PASSED)
    assert {c["event_id"] for c in diff["changes"]} == {stored[lv][0] for lv in PASSED}
    for change in diff["changes"]:
        assert change["saved"]["decided_by"] == "default" and change["saved"]["queue"] == "inbox"
        assert change["candidate"]["decided_by"] == "rules" and change["candidate"]["drop"]
    cand = diff["totals"]["candidate"]
    assert cand["drop"] == 1 + len(PASSED) and cand["rules"] == {"all": len(PASSED)}
    assert cand["stages"] == {STAGE: 2, "rules": len(PASSED), "default": len(EXPECTED) - 4}


async def test_lint_the_cli_and_the_console_name_the_stage_that_decided(
    delivered: dict[str, Any],
) -> None:
    d = delivered
    wid, stored, srv = d["wid"], d["stored"], d["server"]
    rules = [
        {"id": "all", "expr": "true", "action": {"queue": "inbox"}},
        # matches only what the stage decides first: the rules never see it
        {"id": "fatal", "expr": '.payload.level == "fatal"', "action": {"queue": "urgent"}},
    ]
    async with agent(srv.base_url + "/mcp", d["owner"]["token"]) as me:
        await me.call("set_webhook_rules", webhook_id=wid, rules=rules)
        try:
            lint = await me.call("lint_webhook_rules", webhook_id=wid)
            cli = CLI(srv.env)  # a process of its own: the stage is on its PYTHONPATH
            table = cli.run("rules", "explain", stored["fatal"][0], "--table").stdout
            client = httpx.Client(base_url=srv.base_url, timeout=30)
            form = client.get("/console/signin")
            token = re.search(r'name="csrf" value="([^"]+)"', form.text)
            assert token, form.text[:300]
            signed = client.post(
                "/console/signin", data={"csrf": token[1], "token": d["owner"]["token"]}
            )
            assert signed.status_code == 303, signed.text
            page = client.get(f"/console/deliveries/{stored['fatal'][0]}").text
            faulted = client.get(f"/console/deliveries/{stored['raise'][0]}").text
            stale = client.get(f"/console/deliveries/{stored['stale'][0]}").text
        finally:
            await me.call("set_webhook_rules", webhook_id=wid, rules=[])
    # only the deliveries the stage passed reached the rules
    assert lint["evaluated"] == len(EXPECTED)
    assert lint["not_reached"] == len(EXPECTED) - len(PASSED)
    kinds = {(f["rule_id"], f["kind"]) for f in lint["findings"]}
    assert ("fatal", "never_matched") in kinds and ("fatal", "shadowed") not in kinds
    table = " ".join(table.split())  # the heading wraps at the terminal's width
    assert f"by {STAGE}" in table and "decided" in table and "not_reached" in table
    page = html.unescape(page)
    assert f"Decided by stage \u201c{STAGE}\u201d" in page
    assert f"Stage \u201c{STAGE}\u201d decided." in page
    assert "Decided by the rules stage" not in page and "an earlier rule matched" not in page
    assert f"stage \u201c{STAGE}\u201d answered before the rules" in page
    # a delivery the stage faulted on: the console names it, its fault, and the default
    faulted = html.unescape(faulted)
    raised = "stage_error: raised RuntimeError: the level table is not loaded"
    assert f"Fault in stage \u201c{STAGE}\u201d: {raised}" in faulted
    assert "no later stage was asked; the default action applied" in faulted
    assert f"Stage \u201c{STAGE}\u201d faulted: raised RuntimeError" in faulted
    assert "Decided by the default action." in faulted and "Decided by stage" not in faulted
    # a fault the stage reported of itself while passing: the rules were asked after it
    stale = html.unescape(stale)
    assert f"Fault in stage \u201c{STAGE}\u201d: stage_error: the level table is stale" in stale
    assert "reported by the stage itself, which passed" in stale
    assert "no later stage was asked" not in stale
    assert f"Stage \u201c{STAGE}\u201d passed (it decided nothing), reporting: the level" in stale


def test_the_offline_rules_test_takes_the_configs_stage_budget(
    delivered: dict[str, Any], tmp_path: Path
) -> None:
    routing = tmp_path / "routing.json"
    routing.write_text('{"rules": []}')
    # The server's config says stage_timeout_ms = 400: the offline dry run cuts the slow
    # level there too (not at the 5000 ms default), as a live delivery was.
    out = CLI(delivered["server"].env).json(
        "rules",
        "test",
        str(routing),
        "--source",
        "generic",
        "--payload",
        json.dumps({"level": "slow"}),
    )
    assert out["trace"]["cause"] == "stage_timeout"
    [fault] = out["trace"]["faults"]
    assert fault == {"stage": STAGE, "cause": "stage_timeout", "detail": "no answer within 400 ms"}
