"""The plugin host: entry-point discovery, a real third-party package, disabling, the contract."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sbtest import CLI, make_env

from switchboard import hookspecs
from switchboard.errors import ConfigError, PluginError
from switchboard.plugins import (
    ESSENTIAL_PLUGINS,
    build_registries,
    list_plugins,
    make_plugin_manager,
)
from switchboard.registry import SourceRegistry

HELLO = Path(__file__).resolve().parent / "plugins" / "hello"
FIRST_PARTY = {"cairn", "gitea", "github", "generic", "rules", "doorbell", "mcp"}


@pytest.fixture(scope="module")
def hello_installed() -> Iterator[None]:
    """Build and install the fixture distribution like any third-party plugin."""
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "install", "--no-deps", "--no-build-isolation", str(HELLO)],
                   check=True, capture_output=True, timeout=300)
    yield
    subprocess.run([*pip, "uninstall", "-y", "switchboard-hello"], check=True,
                   capture_output=True, timeout=120)


def test_first_party_plugins_load_through_the_entry_point_group() -> None:
    infos = {p.name: p for p in list_plugins(make_plugin_manager())}
    assert FIRST_PARTY <= set(infos)
    for name in FIRST_PARTY:
        assert infos[name].distribution == "switchboard", name
        assert infos[name].version
    assert "switchboard.builtin" in infos


def test_third_party_plugin_is_listed_and_its_hooks_run(
    hello_installed: None, cli: CLI, dsn: str, tmp_path: Path
) -> None:
    listed = {p["name"]: p for p in cli.json("plugins")}
    hello = listed["hello"]
    assert hello["distribution"] == "switchboard-hello"
    assert hello["version"] == "1.2.3"
    assert "switchboard_register_commands" in hello["hooks"]
    assert "switchboard_migrations" in hello["hooks"]

    config = tmp_path / "sb.toml"
    config.write_text('[plugins.hello]\ngreeting = "ahoy"\n')
    out = cli.json("--config", str(config), "hello")
    assert out["greeting"] == "ahoy"
    assert "cairn" in out["sources"]

    # Its migration is applied under its own name.
    applied = cli.json("migrate")["applied"]
    assert applied == ["hello/0001_hello.sql"]
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM hello_marks").fetchone() == (0,)


def test_plugin_config_is_validated_by_its_schema(hello_installed: None, cli: CLI,
                                                  tmp_path: Path) -> None:
    config = tmp_path / "sb.toml"
    config.write_text("[plugins.hello]\ngreeting = 42\n")
    proc = cli.run("--config", str(config), "plugins", check=False)
    assert proc.returncode == 2
    assert "plugins.hello.greeting" in proc.stderr


def test_disabled_plugins_are_not_loaded(hello_installed: None, cli: CLI,
                                         tmp_path: Path) -> None:
    config = tmp_path / "sb.toml"
    config.write_text('disabled_plugins = ["hello", "github"]\n')
    names = {p["name"] for p in cli.json("--config", str(config), "plugins")}
    assert "hello" not in names and "github" not in names and "gitea" in names
    proc = cli.run("--config", str(config), "hello", check=False)
    assert proc.returncode == 2  # argparse: no such command


def test_essential_plugins_cannot_be_disabled() -> None:
    with pytest.raises(ConfigError, match="essential"):
        make_plugin_manager(list(ESSENTIAL_PLUGINS))


def test_disabling_a_source_removes_it_from_the_registry() -> None:
    regs = build_registries(make_plugin_manager(["github"]))
    assert "github" not in regs.sources and "gitea" in regs.sources


def test_duplicate_names_are_refused_naming_both_plugins() -> None:
    reg = SourceRegistry()

    class S:
        name = "cairn"
        trust_mode = "signed"

    reg.current_plugin = "first"
    reg.add(S())
    reg.current_plugin = "second"
    with pytest.raises(PluginError, match="'first'.*'second'"):
        reg.add(S())


def _specs() -> list[tuple[str, object]]:
    return [(n, f) for n, f in inspect.getmembers(hookspecs, inspect.isfunction)
            if hasattr(f, "switchboard_spec")]


def test_every_hook_is_prefixed_and_documented() -> None:
    specs = _specs()
    assert len(specs) >= 14
    for name, fn in specs:
        assert name.startswith("switchboard_"), name
        doc = inspect.getdoc(fn) or ""
        assert len(doc.splitlines()) >= 3, f"{name} needs a real docstring"
        opts = fn.switchboard_spec
        assert not opts.get("firstresult"), f"{name}: no firstresult hooks (async impls)"


def test_every_hook_is_implemented_by_some_plugin_or_exercised_here() -> None:
    """A hook nobody implements or tests is dead contract."""
    pm = make_plugin_manager()
    implemented = {h.name for p in pm.get_plugins() for h in (pm.get_hookcallers(p) or [])}
    # Hooks the fixture plugin implements (tested above) or that later issues fill.
    exercised_by_tests = {"switchboard_config_schema", "switchboard_migrations"}
    reserved = {
        "switchboard_register_subjects",
        "switchboard_register_rule_packs",
        "switchboard_register_llm_providers",
    }
    missing = {n for n, _ in _specs()} - implemented - exercised_by_tests - reserved
    assert not missing, missing


def test_plugins_command_lists_hooks_as_json(cli: CLI) -> None:
    out = json.loads(cli.run("plugins").stdout)
    by = {p["name"]: p for p in out}
    assert "switchboard_register_sources" in by["cairn"]["hooks"]
    assert set(by["cairn"]) == {"name", "version", "distribution", "hooks"}


def test_environment_has_no_switchboard_vars_leaking(tmp_path: Path) -> None:
    env = make_env(None, tmp_path)
    assert "SWITCHBOARD_DATABASE_URL" not in env


def test_routing_stages_are_enabled_and_ordered_by_config(tmp_path: Path) -> None:
    from switchboard.config import load_config
    from switchboard.runtime import Runtime

    def stages(toml: str) -> list[str]:
        path = tmp_path / "stages.toml"
        path.write_text(toml)
        return [s.name for s in Runtime(load_config(path, env={})).stages]

    assert stages("") == ["rules"]  # "llm" is listed by default and skipped until installed
    assert stages("[routing]\nstages = []\n") == []
    assert stages('disabled_plugins = ["rules"]\n') == []


def test_every_command_has_help(cli: CLI) -> None:
    top = cli.run("--help").stdout
    commands = ["serve", "migrate", "plugins", "human", "friend", "endpoint", "webhook",
                "send", "rules", "mcp"]
    for name in commands:
        assert name in top, name
        assert cli.run(name, "--help").returncode == 0, name
    for sub in (("webhook", "create"), ("webhook", "route", "add"), ("rules", "check"),
                ("rules", "test"), ("endpoint", "vend"), ("human", "add"), ("friend", "add")):
        assert cli.run(*sub, "--help").returncode == 0, sub


def test_disabling_an_unknown_plugin_warns_and_a_known_one_does_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level("WARNING", logger="switchboard.plugins"):
        make_plugin_manager(["github", "no-such-plugin"])
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and "'no-such-plugin'" in warned[0]
