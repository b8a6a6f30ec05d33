"""The plugin host: entry-point discovery, disabling, duplicate names, stage order, commands.

A third party's package end to end is tests/test_third_party.py; the hook contract itself is
tests/test_hookspecs.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sbtest import CLI, make_env

from switchboard.errors import ConfigError, PluginError
from switchboard.plugins import (
    ESSENTIAL_PLUGINS,
    build_registries,
    list_plugins,
    make_plugin_manager,
)
from switchboard.registry import SourceRegistry

FIRST_PARTY = {"cairn", "gitea", "github", "generic", "rules", "doorbell", "mcp"}


def test_first_party_plugins_load_through_the_entry_point_group() -> None:
    infos = {p.name: p for p in list_plugins(make_plugin_manager())}
    assert FIRST_PARTY <= set(infos)
    for name in FIRST_PARTY:
        assert infos[name].distribution == "switchboard", name
        assert infos[name].version
    assert "switchboard.builtin" in infos


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


def test_plugins_command_lists_hooks_as_json(cli: CLI) -> None:
    out = json.loads(cli.run("plugins").stdout)
    by = {p["name"]: p for p in out}
    assert "switchboard_register_sources" in by["cairn"]["hooks"]
    assert set(by["cairn"]) == {"name", "version", "distribution", "hooks", "provides"}
    assert by["cairn"]["provides"] == {
        "sources": ["cairn"],
        "projections": ["artifact:cairn"],
        "subjects": ["cairn-artifact"],
    }
    assert by["gitea"]["provides"]["subjects"] == ["gitea-issue"]
    assert by["rules"]["provides"]["stages"] == ["rules"]
    assert by["rules"]["provides"]["rule_packs"] == ["cairn-handoff", "lanes", "pool-review"]
    assert by["rules"]["provides"]["enabled_stages"] == ["rules"]


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

    assert stages("") == ["rules", "llm"]
    # The default list keeps what is enabled (here: the llm plugin disabled)...
    assert stages('disabled_plugins = ["llm"]\n') == ["rules"]
    assert stages('[routing]\nstages = ["llm", "rules"]\n') == ["llm", "rules"]
    # ...and "none" must be said on purpose.
    assert stages("[routing]\nstages = []\n") == []
    assert stages('disabled_plugins = ["rules", "llm"]\n[routing]\nstages = []\n') == []
    with pytest.raises(ConfigError, match=r"routing.stages: none of the default stages"):
        stages('disabled_plugins = ["rules", "llm"]\n')


def test_every_command_has_help(cli: CLI) -> None:
    top = cli.run("--help").stdout
    commands = [
        "serve",
        "migrate",
        "plugins",
        "human",
        "friend",
        "endpoint",
        "webhook",
        "send",
        "rules",
        "mcp",
    ]
    # The script once (above); every command's parser through the same main, in process.
    fast = cli.fast()
    for name in commands:
        assert name in top, name
        assert fast.run(name, "--help").returncode == 0, name
    for sub in (
        ("webhook", "create"),
        ("webhook", "route", "add"),
        ("rules", "check"),
        ("rules", "test"),
        ("endpoint", "vend"),
        ("human", "add"),
        ("friend", "add"),
    ):
        assert fast.run(*sub, "--help").returncode == 0, sub


def test_disabling_an_unknown_plugin_is_refused_naming_it_and_a_known_one_is_not() -> None:
    make_plugin_manager(["github"])
    with pytest.raises(ConfigError) as err:
        make_plugin_manager(["github", "gihtub"])
    said = str(err.value)
    assert said.startswith(
        "invalid config: disabled_plugins: no installed plugin is called 'gihtub'"
    )
    assert "(did you mean 'github'?)" in said and "rules" in said
