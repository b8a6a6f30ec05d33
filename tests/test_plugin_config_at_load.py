"""The mcp and console plugins' own settings are checked when the config is loaded, not in a
server worker: a mistake stops ``serve`` (and every command that reads the config) with exit
2 and one line naming the config file and the entry, before the database or a worker starts."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from sbtest import SWITCHBOARD, make_env, run_in_process, stop_process_group
from switchboard_console.guard import Guard
from switchboard_mcp import hosts

from switchboard.config import load_config
from switchboard.plugin import ConfigError
from switchboard.runtime import Runtime

_HOST_FORM = "can never match; give host[:port] or host:*"
_ORIGIN_FORM = "can never match; give scheme://host[:port] or scheme://host:*"

# (the config file, what follows "config file PATH: ", whole or (ending in "(") its start)
CASES = [
    (
        '[plugins.mcp]\nallowed_hosts = ["a b"]\n',
        f"plugins.mcp.allowed_hosts[0]: 'a b' {_HOST_FORM}",
    ),
    (
        '[plugins.mcp]\nallowed_hosts = ["mcp.example.com:*", "*.example.com"]\n',
        f"plugins.mcp.allowed_hosts[1]: '*.example.com' {_HOST_FORM}",
    ),
    (
        '[plugins.mcp]\nallowed_origins = ["https://app.example.com", "null"]\n',
        f"plugins.mcp.allowed_origins[1]: 'null' {_ORIGIN_FORM}",
    ),
    (
        '[plugins.console]\ntrusted_proxies = ["nope"]\n',
        "plugins.console.trusted_proxies[0]: 'nope' is not an address or a CIDR (",
    ),
    (
        '[plugins.console]\ntrusted_proxies = ["127.0.0.1", "10.0.0.1/8"]\n',
        "plugins.console.trusted_proxies[1]: '10.0.0.1/8' is not an address or a CIDR (",
    ),
    (
        '[plugins.console]\nallowed_hosts = ["example.com/"]\n',
        f"plugins.console.allowed_hosts[0]: 'example.com/' {_HOST_FORM}",
    ),
    (
        '[plugins.console]\nallowed_origins = ["https://example.com/"]\n',
        f"plugins.console.allowed_origins[0]: 'https://example.com/' {_ORIGIN_FORM}",
    ),
]
IDS = [told.split(":")[0] for _, told in CASES]


def _told(path: Path, told: str) -> str:
    return f"config file {path}: {told}"


def _matches(said: str, path: Path, told: str) -> bool:
    whole = _told(path, told)
    return said.startswith(whole) if told.endswith("(") else said == whole


@pytest.mark.parametrize(("toml", "told"), CASES, ids=IDS)
def test_a_bad_entry_is_refused_at_load_naming_the_file(
    tmp_path: Path, toml: str, told: str
) -> None:
    path = tmp_path / "x.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as caught:
        Runtime(load_config(path, env={}))
    said = str(caught.value)
    assert _matches(said, path, told), said
    assert "\n" not in said and "invalid config" not in said


def test_good_entries_load_and_still_reach_the_worker(tmp_path: Path) -> None:
    """The run-time use is unchanged: /mcp and the console guard are built from the values."""
    path = tmp_path / "x.toml"
    path.write_text(
        '[plugins.mcp]\nallowed_hosts = ["mcp.example.com:*"]\n'
        'allowed_origins = ["https://app.example.com"]\n'
        '[plugins.console]\nallowed_hosts = ["console.example"]\n'
        'trusted_proxies = ["10.0.0.0/8", "::1"]\n'
    )
    rt = Runtime(load_config(path, env={}))
    settings = hosts.transport_security(rt.config)
    assert "mcp.example.com:*" in settings.allowed_hosts
    assert "https://app.example.com" in settings.allowed_origins
    guard = Guard(rt.config)
    assert "console.example" in guard.hosts
    assert [str(n) for n in guard.proxies] == ["10.0.0.0/8", "::1/128"]


def test_a_command_other_than_serve_refuses_it_too(tmp_path: Path) -> None:
    path = tmp_path / "x.toml"
    path.write_text(CASES[0][0])
    proc = run_in_process(("--config", str(path), "plugins"), make_env(None, tmp_path / "data"))
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stderr.splitlines() == [f"switchboard: error: {_told(path, CASES[0][1])}"]
    assert proc.stdout == ""


SERVE_CASES = [CASES[0], CASES[3]]


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("workers", [(), ("--workers", "1")], ids=["default-workers", "1-worker"])
@pytest.mark.parametrize(("toml", "told"), SERVE_CASES, ids=["mcp", "console"])
def test_serve_exits_2_with_one_line_before_any_worker(
    tmp_path: Path, toml: str, told: str, workers: tuple[str, ...]
) -> None:
    """The real console script: refused before the database or a worker starts, and
    nothing of its process group is left running."""
    path = tmp_path / "x.toml"
    path.write_text(toml)
    data = tmp_path / "data"
    proc = subprocess.Popen(
        [*SWITCHBOARD, "--config", str(path), "serve", "--port", "0", *workers],
        env=make_env(None, data),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=60)
        left = _group_alive(proc.pid)  # asked before anything of it is killed
    finally:
        stop_process_group(proc)  # type: ignore[arg-type]
    assert proc.returncode == 2, (proc.returncode, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err and out == "", err
    assert lines[0].startswith("switchboard: error: ")
    assert _matches(lines[0].removeprefix("switchboard: error: "), path, told), lines[0]
    assert not data.exists()  # no database was made, so no worker could have started
    assert not left  # and nothing of its process group outlived it
