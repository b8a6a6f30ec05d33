"""``disabled_plugins = ["rules"]``: no rule verbs, no ``rules`` command, no stage, and a
webhook's saved rules are not applied (the default routes every delivery)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from sbtest import CLI, make_env
from sbworld import World

from switchboard.config import load_config
from switchboard.routing.trace import validate_trace
from switchboard.runtime import Runtime
from switchboard.service import rules as rules_svc

RULE_TOOLS = {
    "list_webhook_rules", "set_webhook_rules", "add_webhook_rule", "update_webhook_rule",
    "move_webhook_rule", "remove_webhook_rule", "test_webhook_rules", "diff_webhook_rules",
    "explain_webhook_event", "lint_webhook_rules", "list_rule_versions", "get_rule_version",
    "rollback_webhook_rules", "reroute_webhook_events",
    "release_held_events",
}  # fmt: skip


@pytest.fixture
def disabled(tmp_path: Path) -> Path:
    config = tmp_path / "no-rules.toml"
    config.write_text('disabled_plugins = ["rules"]\n')
    return config


def _runtime(dsn: str | None, tmp_path: Path, config: Path | None) -> Runtime:
    extra = {"SWITCHBOARD_CONFIG": str(config)} if config else {}
    return Runtime(load_config(env=make_env(dsn, tmp_path / "data", **extra)))


def test_no_rule_tools_and_no_rules_stage(disabled: Path, tmp_path: Path) -> None:
    enabled = _runtime(None, tmp_path, None)
    assert RULE_TOOLS <= {t.name for t in enabled.registries.mcp_tools}  # the control
    assert "rules" in [s.name for s in enabled.stages]

    rt = _runtime(None, tmp_path, disabled)
    tools = {t.name for t in rt.registries.mcp_tools}
    assert tools and not tools & RULE_TOOLS  # the MCP plugin's own verbs remain
    assert "rules" not in [s.name for s in rt.stages]
    assert rt.registries.stages.get("rules") is None


def test_there_is_no_rules_command(disabled: Path, tmp_path: Path) -> None:
    cli = CLI(make_env(None, tmp_path / "data", SWITCHBOARD_CONFIG=str(disabled)))
    rules = tmp_path / "r.json"
    rules.write_text(json.dumps({"rules": []}))
    proc = cli.run("rules", "check", str(rules), check=False)
    assert proc.returncode == 2  # argparse: no such command
    assert "invalid choice: 'rules'" in proc.stderr
    listed = [
        line.split()[0]
        for line in cli.run("--help").stdout.splitlines()
        if line.startswith("    ") and not line.startswith("     ")
    ]
    assert "webhook" in listed and "rules" not in listed


async def test_saved_rules_are_not_applied(
    server_factory: Any, dsn: str, runtime: Runtime, disabled: Path
) -> None:
    srv = server_factory(dsn, config=disabled)
    w = World(CLI(srv.env))
    w.human("alice")
    w.endpoint("alice", "owner")
    hook = w.webhook("owner", "generic")
    # Saved while the plugin was enabled (the runtime fixture has it): drop everything.
    saved = await rules_svc.set_rules(
        runtime,
        None,
        hook["webhook_id"],
        [
            {"id": "drop-all", "expr": "true", "action": {"drop": True}},
        ],
    )
    assert [r["id"] for r in saved["rules"]] == ["drop-all"]
    tried = await rules_svc.test_rules(runtime, None, hook["webhook_id"], payload={"x": 1})
    assert tried["trace"]["rule_id"] == "drop-all"  # with the plugin, it would be dropped

    resp = httpx.post(
        hook["ingest_url"],
        content=b'{"x": 1}',
        timeout=30,
        headers={"X-Delivery-Id": "d1", "Content-Type": "application/json"},
    )
    assert resp.status_code == 202, resp.text
    out = resp.json()
    assert out["created"] == 1 and not out.get("dropped")
    assert [t["queue"] for t in out["todos"]] == ["inbox"]
    with psycopg.connect(dsn) as conn:
        [(trace,)] = conn.execute("SELECT routing_trace FROM events").fetchall()
        assert conn.execute("SELECT count(*) FROM todos").fetchone() == (1,)
    validate_trace(trace)
    assert trace["stage"] == "default" and "rule_id" not in trace
