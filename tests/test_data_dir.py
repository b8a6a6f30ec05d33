"""The data dir: per-user by default, and no command but serve, migrate and ``human add``
ever creates an empty embedded database (wherever it runs)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from platformdirs import user_data_dir
from sbtest import SWITCHBOARD, remember_secrets

from switchboard.config import load_config


def _env(home: Path, **extra: str) -> dict[str, str]:
    """A user whose per-user directories are under ``home`` (nothing of the real user's)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
    env.update(
        HOME=str(home),
        XDG_DATA_HOME=str(home / "share"),
        SWITCHBOARD_SECRET_KEY="test-secret-key-0123456789",
        **extra,
    )
    return env


def _run(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [*SWITCHBOARD, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_the_default_is_the_per_user_data_dir(tmp_path: Path) -> None:
    cfg = load_config(env={})
    assert cfg.data_dir == Path(user_data_dir("switchboard", appauthor=False))
    assert cfg.data_dir_from == "the per-user default"
    assert load_config(env={"SWITCHBOARD_DATA_DIR": str(tmp_path)}).data_dir == tmp_path


def test_a_relative_data_dir_is_relative_to_the_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = tmp_path / "etc" / "switchboard.toml"
    conf.parent.mkdir()
    conf.write_text('data_dir = "state"\n')
    monkeypatch.chdir(tmp_path)
    cfg = load_config(conf, env={})
    assert cfg.data_dir == tmp_path / "etc" / "state"
    assert cfg.data_dir_from == f"data_dir in {conf}"
    # The environment still wins, relative to where it was set (the shell's directory).
    cfg = load_config(conf, env={"SWITCHBOARD_DATA_DIR": "here"})
    assert cfg.data_dir == tmp_path / "here" and cfg.data_dir_from == "SWITCHBOARD_DATA_DIR"


@pytest.mark.parametrize(
    "args",
    [
        ("human", "list"),
        ("endpoint", "list"),
        ("todos", "list"),
        ("webhook", "list"),
        ("endpoint", "vend", "--owner", "alice", "--name", "x"),
        ("mcp", "--token", "sbe_x"),
    ],
)
def test_read_and_client_commands_never_create_a_database(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    env = _env(tmp_path / "home")
    proc = _run(env, tmp_path / "elsewhere", *args)
    assert proc.returncode == 2 and proc.stdout == ""
    data = tmp_path / "home" / "share" / "switchboard"
    [line] = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert line.startswith(f"switchboard: error: no Switchboard database in {data} ")
    for needle in (
        "the per-user default",
        str(data / "pg"),
        "`switchboard serve`",
        "`switchboard migrate`",
        "--config",
        "SWITCHBOARD_DATA_DIR",
        "SWITCHBOARD_DATABASE_URL",
    ):
        assert needle in line, needle
    assert not data.exists() and not (tmp_path / "elsewhere" / ".switchboard").exists()


@pytest.mark.slow
async def test_one_database_from_any_directory_stdio_mcp_included(tmp_path: Path) -> None:
    """``human add`` creates the per-user database; commands and ``switchboard mcp`` run
    from other directories find that same one (the README's stdio ``.mcp.json``)."""
    env = _env(tmp_path / "home")
    data = tmp_path / "home" / "share" / "switchboard"
    made = _run(env, tmp_path / "a", "human", "add", "alice")
    assert made.returncode == 0, made.stderr
    assert f"initialized embedded PostgreSQL in {data / 'pg'}" in made.stderr
    vend = _run(
        env,
        tmp_path / "b",
        "endpoint",
        "vend",
        "--owner",
        "alice",
        "--name",
        "me",
        "--queues",
        "inbox",
        "--webhook-queues",
        "inbox",
        "--source-types",
        "generic",
        "--webhook-max",
        "1",
    )
    assert vend.returncode == 0, vend.stderr
    token = json.loads(vend.stdout)["token"]
    remember_secrets({"token": token})

    # What a client does with the README's stdio entry, started in yet another directory.
    (tmp_path / "c").mkdir()
    server = StdioServerParameters(
        command="switchboard",
        args=["mcp"],
        cwd=tmp_path / "c",
        env={
            "PATH": str(Path(SWITCHBOARD[0]).parent) + os.pathsep + env["PATH"],
            "HOME": env["HOME"],
            "XDG_DATA_HOME": env["XDG_DATA_HOME"],
            "SWITCHBOARD_SECRET_KEY": env["SWITCHBOARD_SECRET_KEY"],
            "SWITCHBOARD_MCP_TOKEN": token,
        },
    )
    with open(tmp_path / "mcp.err", "w") as errlog:
        async with stdio_client(server, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                result = await session.call_tool("list_webhooks", {})
    assert not result.is_error, result.content
    assert result.structured_content is not None
    assert result.structured_content["ceiling"]["webhook_source_types"] == ["generic"]
    assert not (tmp_path / "c" / ".switchboard").exists()


def test_reusing_the_embedded_database_is_said_only_at_v(tmp_path: Path) -> None:
    env = _env(tmp_path / "home")
    made = _run(env, tmp_path, "human", "add", "alice")
    assert made.returncode == 0 and "initialized embedded PostgreSQL" in made.stderr
    quiet = _run(env, tmp_path, "human", "list", "--json")
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    loud = _run(env, tmp_path, "-v", "human", "list", "--json")
    assert loud.returncode == 0 and "reusing embedded PostgreSQL in" in loud.stderr
    assert loud.stdout == quiet.stdout


@pytest.mark.parametrize("args", [("human", "list"), ("endpoint", "list"), ("webhook", "list")])
def test_a_read_command_refuses_a_data_dir_that_is_a_file(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    afile = tmp_path / "afile"
    afile.write_text("not a directory\n")
    env = _env(tmp_path / "home", SWITCHBOARD_DATA_DIR=str(afile))
    proc = _run(env, tmp_path / "elsewhere", *args)
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr
    assert proc.stderr.splitlines() == [
        f"switchboard: error: cannot use data_dir {afile} (from SWITCHBOARD_DATA_DIR): it is a"
        " file, not a directory"
    ]


def test_a_read_command_refuses_a_pg_version_it_cannot_read(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "pg" / "PG_VERSION").mkdir(parents=True)
    proc = _run(_env(tmp_path / "home", SWITCHBOARD_DATA_DIR=str(data)), tmp_path, "human", "list")
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr
    assert proc.stderr.splitlines() == [
        f"switchboard: error: cannot use data_dir {data} (from SWITCHBOARD_DATA_DIR): cannot read"
        f" {data / 'pg' / 'PG_VERSION'}: is a directory"
    ]
    (data / "pg" / "PG_VERSION").rmdir()
    (data / "pg" / "PG_VERSION").write_bytes(b"\xff\n")
    proc = _run(_env(tmp_path / "home", SWITCHBOARD_DATA_DIR=str(data)), tmp_path, "human", "list")
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr
    assert proc.stderr.splitlines() == [
        f"switchboard: error: cannot use data_dir {data} (from SWITCHBOARD_DATA_DIR):"
        f" {data / 'pg' / 'PG_VERSION'} is not a PostgreSQL version number (not UTF-8 text)"
    ]


#: What a secret.key that holds no usable key says after its reason.
KEY_FILE_HINT = (
    "put back the key the signing secrets were sealed with (or set SWITCHBOARD_SECRET_KEY),"
    " or delete the file for a new one to be generated (every webhook's signing secret then"
    " needs rotating)"
)


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"", "the key must be at least 16 characters (it is empty)"),
        (b"\n", "the key must be at least 16 characters (it is empty)"),
        (b"short-key\n", "the key must be at least 16 characters (got 9 characters)"),
        (b"\xff\xfe\n", "is not UTF-8 text (byte 0xff at offset 0)"),
    ],
)
def test_serve_refuses_a_secret_key_file_without_a_usable_key(
    tmp_path: Path, content: bytes, why: str
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    key = data / "secret.key"
    key.write_bytes(content)
    env = _env(tmp_path / "home", SWITCHBOARD_DATA_DIR=str(data))
    del env["SWITCHBOARD_SECRET_KEY"]
    proc = _run(env, tmp_path, "serve", "--port", "0", "--workers", "1")
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr
    assert proc.stderr.splitlines() == [
        f"switchboard: error: secret key file {key}: {why}; {KEY_FILE_HINT}"
    ]
    assert not (data / "pg").exists()  # refused before the database was started
