"""A config typo stops every command at start, exit 2, with one line naming the key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sbtest import make_env, run_in_process

CASES = [
    # (config, what the one line must say)
    (
        '[routing]\nstages = ["rulez"]\n',
        "config file {config}: routing.stages: 'rulez' is not an installed stage (did you mean "
        "'rules'?); the stages are: ",
    ),
    (
        '[routing]\nstages = ["rules", "llm"]\ndisabled_plugins = []\n',
        None,  # fine: both installed
    ),
    (
        'disabled_plugins = ["llm"]\n[routing]\nstages = ["rules", "llm"]\n',
        "config file {config}: routing.stages: 'llm' is not an installed stage (disabled_plugins "
        "disables the plugin of that name)",
    ),
    (
        "[plugins.rule]\nrule_ms = 5\n",
        "config file {config}: plugins.rule: no installed plugin is called 'rule' (did you "
        "mean 'rules'?); installed: ",
    ),
    (
        'disabled_plugins = ["lmm"]\n',
        "config file {config}: disabled_plugins: no installed plugin is called 'lmm' (did you "
        "mean 'llm'?); installed: ",
    ),
    (
        'disabled_plugins = ["rules", "llm"]\n',
        "config file {config}: routing.stages: none of the default stages (rules, llm) is "
        "installed and enabled",
    ),
]


@pytest.mark.parametrize("toml,says", CASES, ids=[c[0].strip() for c in CASES])
@pytest.mark.parametrize("command", [("plugins",), ("rules", "--help")])
def test_every_command_refuses_a_typo_in_one_line(
    tmp_path: Path, toml: str, says: str | None, command: tuple[str, ...]
) -> None:
    config = tmp_path / "switchboard.toml"
    config.write_text(toml.replace("disabled_plugins = []\n", ""))
    proc = run_in_process(("--config", str(config), *command), make_env(None, tmp_path))
    if says is None:
        assert proc.returncode == 0, proc.stderr
        return
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    says = says.replace("{config}", str(config))
    assert len(lines) == 1 and lines[0].startswith(f"switchboard: error: {says}"), proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_serve_refuses_a_typod_stage_before_it_starts(tmp_path: Path) -> None:
    config = tmp_path / "switchboard.toml"
    config.write_text('[routing]\nstages = ["rulez"]\n')
    proc = subprocess.run(
        [sys.executable, "-m", "switchboard.cli.main", "--config", str(config), "serve"],
        env=make_env(None, tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert (
        proc.stderr.strip().splitlines() == [proc.stderr.strip()]
        and "routing.stages: 'rulez'" in proc.stderr
    )
    assert not (tmp_path / "pg").exists()  # refused before any database was made


def test_no_stages_on_purpose_starts_with_a_warning(
    server_factory: Any, dsn: str, tmp_path: Path
) -> None:
    config = tmp_path / "switchboard.toml"
    config.write_text("[routing]\nstages = []\n")
    srv = server_factory(dsn, config=config)
    said = [line for line in srv.log.read_text().splitlines() if "routing stages" in line]
    assert len(said) == 1, said
    assert "routing stages: none (routing.stages = []): every delivery takes the default" in said[0]
    assert "warning" in said[0].lower()
