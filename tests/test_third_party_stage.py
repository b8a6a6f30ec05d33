"""A third party's routing stage (tests/plugins/sentrylevel), installed like a package: it
decides, passes and misbehaves in every way a stage can, through the live receiver, the
MCP dry run and /metrics, and no delivery is lost."""

from __future__ import annotations

import json
import shutil
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
    "slow": ("default", "stage_timeout", "stage_timeout", "no answer within 400 ms"),
}
MISBEHAVING = [level for level, want in EXPECTED.items() if want[2] is not None]


@pytest.fixture(scope="module")
def sentry_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("sentrylevel")
    try:
        yield install_distribution(SENTRY, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _stage_errors(url: str) -> float:
    text = httpx.get(url, timeout=10).text
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "switchboard_stage_errors_total" and s.labels == {"stage": STAGE}:
                return float(s.value)
    return 0.0


async def test_a_third_party_stage_decides_passes_and_misbehaves_without_losing_a_delivery(
    sentry_site: Path, server_factory: Any, dsn: str, tmp_path: Path
) -> None:
    config = tmp_path / "sb.toml"
    config.write_text(f'[routing]\nstages = ["{STAGE}", "rules"]\nstage_timeout_ms = 400\n')
    srv = server_factory(dsn, config=config, env_extra={"PYTHONPATH": str(sentry_site)})
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

    bodies = {level: json.dumps({"level": level, "n": n}) for n, level in enumerate(EXPECTED)}
    for level, body in bodies.items():
        resp = httpx.post(
            hook["ingest_url"],
            content=body,
            headers={"Content-Type": "application/json", "X-Delivery-Id": f"d-{level}"},
            timeout=30,
        )
        assert resp.status_code == 202, (level, resp.text)

    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT id, body, routing_trace, disposition FROM events WHERE webhook_id = %s",
            (wid,),
        ).fetchall()
    stored = {json.loads(bytes(r[1]))["level"]: (str(r[0]), r[2], r[3]) for r in rows}
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
    log = srv.log.read_text()
    assert "Traceback" not in log
