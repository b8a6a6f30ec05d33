"""Mistakes found after the schema (stages, disabled plugins, a plugin's own checks) name the file."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from sbtest import make_env, run_in_process

from switchboard.config import load_config
from switchboard.plugin import ConfigError, hookimpl
from switchboard.plugins import make_plugin_manager
from switchboard.runtime import Runtime

# (the config file, how what follows "config file PATH: " must start)
FILE_CASES = [
    (
        '[routing]\nstages = ["rules", "nope"]\n',
        "routing.stages: 'nope' is not an installed stage; the stages are: ",
    ),
    (
        '[routing]\nstages = ["rulez"]\n',
        "routing.stages: 'rulez' is not an installed stage (did you mean 'rules'?); the stages"
        " are: ",
    ),
    (
        'disabled_plugins = ["llm"]\n[routing]\nstages = ["rules", "llm"]\n',
        "routing.stages: 'llm' is not an installed stage (disabled_plugins disables the plugin"
        " of that name); the stages are: ",
    ),
    (
        'disabled_plugins = ["rules", "llm"]\n',
        "routing.stages: none of the default stages (rules, llm) is installed and enabled; name"
        " the stages to run, or write routing.stages = [] for every delivery to take the"
        " default action",
    ),
    # the schema's own check (told where it came from already): kept so
    ('[routing]\nstages = ["rules", "rules"]\n', "routing.stages: must not repeat items"),
    (
        'disabled_plugins = ["nope"]\n',
        "disabled_plugins: no installed plugin is called 'nope'; installed: ",
    ),
    (
        'disabled_plugins = ["lmm"]\n',
        "disabled_plugins: no installed plugin is called 'lmm' (did you mean 'llm'?); installed: ",
    ),
    (
        'disabled_plugins = ["switchboard.builtin"]\n',
        "disabled_plugins: 'switchboard.builtin' is essential",
    ),
    (
        '[[plugins.llm.providers]]\ntype = "static"\n[[plugins.llm.providers]]\ntype = "static"\n',
        "plugins.llm.providers[1]: a second provider named 'static' (providers[0] has that"
        " name; one without a name is named after its type); give each a distinct name",
    ),
    (
        '[[plugins.llm.providers]]\ntype = "openai"\nbase_url = "http://127.0.0.1:0/v1"\n',
        "plugins.llm.providers[0].base_url: must be an http:// or https:// URL",
    ),
]
IDS = [c[0].strip()[:40] for c in FILE_CASES]


@pytest.mark.parametrize(("toml", "told"), FILE_CASES, ids=IDS)
def test_a_mistake_found_at_load_names_the_file(tmp_path: Path, toml: str, told: str) -> None:
    path = tmp_path / "x.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as caught:
        Runtime(load_config(path, env={}))
    said = str(caught.value)
    assert said.startswith(f"config file {path}: {told}"), said
    assert "invalid config" not in said and "\n" not in said


@pytest.mark.parametrize(("toml", "told"), FILE_CASES, ids=IDS)
def test_a_file_named_by_switchboard_config_is_named_too(
    tmp_path: Path, toml: str, told: str
) -> None:
    path = tmp_path / "x.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as caught:
        Runtime(load_config(env={"SWITCHBOARD_CONFIG": str(path)}))
    assert str(caught.value).startswith(f"config file {path}: {told}"), str(caught.value)


@pytest.mark.parametrize(
    "toml",
    [
        '[routing]\nstages = ["rules", "nope"]\n',
        'disabled_plugins = ["nope"]\n',
        '[[plugins.llm.providers]]\ntype = "static"\n[[plugins.llm.providers]]\ntype = "static"\n',
    ],
)
@pytest.mark.parametrize("how", ["--config", "SWITCHBOARD_CONFIG"])
def test_serve_exits_2_with_one_line_naming_the_file(tmp_path: Path, toml: str, how: str) -> None:
    path = tmp_path / "x.toml"
    path.write_text(toml)
    flags, extra = (("--config", str(path)), {}) if how == "--config" else ((), {how: str(path)})
    env = make_env(None, tmp_path / "data", **extra)
    proc = run_in_process((*flags, "serve", "--port", "0"), env)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr and proc.stdout == "", proc.stderr
    assert lines[0].startswith(f"switchboard: error: config file {path}: "), lines[0]
    assert not (tmp_path / "data").exists()  # refused before anything was made


def test_without_a_file_it_is_still_an_invalid_config() -> None:
    with pytest.raises(ConfigError) as caught:
        make_plugin_manager(["nope"])
    assert str(caught.value).startswith(
        "invalid config: disabled_plugins: no installed plugin is called 'nope'"
    )


def test_the_config_knows_which_variable_set_a_key(tmp_path: Path) -> None:
    path = tmp_path / "x.toml"
    path.write_text('addr = "127.0.0.1:8000"\n')
    config = load_config(path, env={"SWITCHBOARD_ADDR": "127.0.0.1:9000"})
    assert config.origin.where(("addr",)) == "SWITCHBOARD_ADDR"
    assert config.origin.where(("routing", "stages")) == f"config file {path}: routing.stages"


# -- a third party's plugin: it sees only its section, the host names the file ----------

ACME_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "limit": {"type": "integer", "default": 5},
        "hosts": {"type": "array", "items": {"type": "string"}},
    },
    "additionalProperties": False,
}


def _acme(message: str) -> SimpleNamespace:
    """A plugin whose own check of ``[plugins.acme]`` refuses it with ``message``."""

    @hookimpl
    def switchboard_config_schema() -> dict[str, Any]:
        return ACME_SCHEMA

    @hookimpl
    def switchboard_register_sources(register: Any, config: dict[str, Any]) -> None:
        raise ConfigError(message)

    return SimpleNamespace(
        switchboard_config_schema=switchboard_config_schema,
        switchboard_register_sources=switchboard_register_sources,
    )


def _runtime_with_acme(config_path: Path | None, message: str) -> Runtime:
    pm = make_plugin_manager()
    pm.register(_acme(message), name="acme")
    return Runtime(load_config(config_path, env={}), pm)


ACME_CASES = [
    # (what the plugin says, what follows the location: "config file PATH: " or none)
    ("limit: must be below 10 (got 12)", "plugins.acme.limit: must be below 10 (got 12)"),
    ("hosts[1]: 'a b' is no host", "plugins.acme.hosts[1]: 'a b' is no host"),
    ("[plugins.acme] limit: too high", "plugins.acme.limit: too high"),
    ("invalid config: [plugins.acme] hosts[0]: bad", "plugins.acme.hosts[0]: bad"),
    ("plugins.acme.hosts[0]: bad", "plugins.acme.hosts[0]: bad"),
    ("invalid config: [plugins.acme]: needs hosts", "plugins.acme: needs hosts"),
    ("plugins.acme: needs hosts", "plugins.acme: needs hosts"),
    ("the ACME_TOKEN variable is not set", "plugins.acme: the ACME_TOKEN variable is not set"),
    # a leading word that is no key of the section is the message's
    ("error: no licence", "plugins.acme: error: no licence"),
]


@pytest.mark.parametrize(("says", "told"), ACME_CASES, ids=[c[0] for c in ACME_CASES])
def test_a_plugins_own_refusal_is_told_where_its_section_came_from(
    tmp_path: Path, says: str, told: str
) -> None:
    path = tmp_path / "x.toml"
    path.write_text('[plugins.acme]\nlimit = 12\nhosts = ["ok", "a b"]\n')
    with pytest.raises(ConfigError) as caught:
        _runtime_with_acme(path, says)
    assert str(caught.value) == f"config file {path}: {told}"


@pytest.mark.parametrize(("says", "told"), ACME_CASES, ids=[c[0] for c in ACME_CASES])
def test_a_plugins_own_refusal_without_a_file_is_an_invalid_config(says: str, told: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _runtime_with_acme(None, says)
    assert str(caught.value) == f"invalid config: {told}"


def test_a_refusal_the_host_located_already_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "x.toml"
    path.write_text("[plugins.acme]\nlimit = 12\n")
    said = f"config file {path}: plugins.acme.limit: too high"
    with pytest.raises(ConfigError) as caught:
        _runtime_with_acme(path, said)
    assert str(caught.value) == said
