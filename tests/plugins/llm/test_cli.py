"""The operator's side, through the real CLI: ``switchboard llm``, ``switchboard plugins``,
and the README's static-provider walkthrough against the real server."""

from __future__ import annotations

import json
from pathlib import Path

from sbllm import QUEUES, Tenant
from sbtest import CLI, make_env

from switchboard.routing.trace import validate_trace


async def test_llm_set_get_clear(tenant: Tenant, tmp_path: Path) -> None:
    t = tenant
    cli = t.w.cli
    doc = tmp_path / "triage.json"
    doc.write_text(
        json.dumps(
            {
                "provider": "static",
                "model": "static-triage",
                "queues": QUEUES,
                "prompt_budget_per_day": 50,
            }
        )
    )
    saved = cli.json("llm", "set", "--endpoint", t.owner, "--file", str(doc))
    assert saved["llm_triage"]["prompt_budget_per_day"] == 50
    assert saved["llm_triage"]["min_confidence"] == 0.7
    # Each verb through the installed script once; repeats in process.
    assert cli.json("llm", "get", "--endpoint", t.owner)["llm_triage"] == saved["llm_triage"]

    # The README's walkthrough: the static provider answers "triage" for this model.
    t.deliver({"title": "disk full on db-2"}, "cli-1")
    trace, todos = t.stored("cli-1")
    validate_trace(trace)
    assert trace["action"] == {"queue": "triage"}
    assert {k: trace["llm"][k] for k in ("provider", "model", "queue", "confidence")} == {
        "provider": "static",
        "model": "static-triage",
        "queue": "triage",
        "confidence": 0.95,
    }
    assert [q for q, _ in todos] == ["triage"]

    # From stdin; a model the static provider has text (not JSON) for.
    broken = json.dumps({"provider": "static", "model": "static-broken", "queues": QUEUES})
    cli.run("llm", "set", "--endpoint", t.owner, "--file", "-", input=broken)
    t.deliver({"title": "disk full on db-3"}, "cli-2")
    trace, _ = t.stored("cli-2")
    assert trace["cause"] == "llm_invalid_answer" and trace["llm"]["answer"] == "not json"

    assert cli.json("llm", "clear", "--endpoint", t.owner)["llm_triage"] is None
    assert cli.fast().json("llm", "get", "--endpoint", t.owner)["llm_triage"] is None


async def test_llm_refusals_exit_non_zero_with_the_reason(tenant: Tenant, tmp_path: Path) -> None:
    cli = tenant.w.cli
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps({"provider": "static", "model": "m", "queues": QUEUES, "timeout_ms": 999999})
    )
    proc = cli.run("llm", "set", "--endpoint", tenant.owner, "--file", str(bad), check=False)
    assert proc.returncode == 2 and proc.stdout == ""  # a bad input file
    assert "llm_triage.timeout_ms: at most 5000" in proc.stderr
    bad.write_text("{not json")
    cli = cli.fast()  # the script ran once above; the other refusals through the same main
    proc = cli.run("llm", "set", "--endpoint", tenant.owner, "--file", str(bad), check=False)
    assert proc.returncode == 2 and "is not JSON" in proc.stderr
    proc = cli.run("llm", "get", "--endpoint", "00000000-0000-0000-0000-000000000000", check=False)
    assert proc.returncode == 1 and "not_found" in proc.stderr
    assert cli.run("llm", "set", "--help").returncode == 0


async def test_plugins_lists_the_stage_and_the_providers(tenant: Tenant, tmp_path: Path) -> None:
    listed = {p["name"]: p for p in tenant.w.cli.json("plugins")}
    provides = listed["llm"]["provides"]
    assert provides["stages"] == ["llm"] and provides["enabled_stages"] == ["llm"]
    assert provides["llm_providers"] == ["fake", "static"]
    assert provides["mcp_tools"] == ["get_llm_triage", "set_llm_triage"]
    assert provides["commands"] == ["llm"]
    assert "switchboard_register_llm_providers" in listed["llm"]["hooks"]

    # No providers configured: the stage is there, nothing can be asked.
    bare = CLI(make_env(None, tmp_path / "data"))
    listed = {p["name"]: p for p in bare.json("plugins")}
    assert "llm_providers" not in listed["llm"]["provides"]
    # An operator who lists stages without "llm" turns it off.
    config = tmp_path / "no-llm.toml"
    config.write_text('[routing]\nstages = ["rules"]\n')
    listed = {p["name"]: p for p in bare.json("--config", str(config), "plugins")}
    assert "enabled_stages" not in listed["llm"]["provides"]


def test_an_invalid_plugins_llm_section_stops_start_up(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('[[plugins.llm.providers]]\ntype = "openai"\n')  # no base_url
    proc = CLI(make_env(None, tmp_path / "data")).run(
        "--config", str(config), "plugins", check=False
    )
    assert proc.returncode == 2
    assert f"config file {config}: plugins.llm.providers[0].base_url: is required" in proc.stderr


async def test_offline_rules_test_never_asks_a_model(tenant: Tenant, tmp_path: Path) -> None:
    routing = tmp_path / "routing.json"
    routing.write_text(json.dumps({"rules": []}))
    out = tenant.w.cli.json(
        "rules", "test", str(routing), "--source", "generic", "--payload", '{"title": "x"}'
    )
    assert out["trace"] == {
        "stage": "default",
        "cause": "no_match_default",
        "action": {"queue": "inbox"},
    }
