"""Configuration: defaults, TOML, environment overrides, and errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from switchboard.config import load_config
from switchboard.errors import ConfigError


def test_defaults_without_file_or_env() -> None:
    cfg = load_config(env={})
    assert cfg.database_url is None
    assert cfg.base_url == "http://127.0.0.1:8080"
    assert (cfg.host, cfg.port) == ("127.0.0.1", 8080)
    assert cfg.data_dir == Path("./.switchboard").resolve()
    assert cfg.section("ingest")["max_body_bytes"] == 5 * 1024 * 1024


def test_environment_overrides_file(tmp_path: Path) -> None:
    path = tmp_path / "sb.toml"
    path.write_text('addr = "0.0.0.0:9000"\nbase_url = "https://file.example"\n')
    env = {
        "SWITCHBOARD_CONFIG": str(path),
        "SWITCHBOARD_BASE_URL": "https://env.example/",
        "SWITCHBOARD_DATABASE_URL": "postgresql://x/y",
        "SWITCHBOARD_DATA_DIR": str(tmp_path / "d"),
    }
    cfg = load_config(env=env)
    assert cfg.port == 9000
    assert cfg.base_url == "https://env.example"
    assert cfg.database_url == "postgresql://x/y"
    assert cfg.data_dir == tmp_path / "d"


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        ('addr = "nohostport"', "addr"),
        ("[server]\nworkers = 0", "server.workers"),
        ("[server]\nthreads = 3", "server.threads"),
        ("bogus = 1", "bogus"),
        ('[ingest]\nmax_body_bytes = "big"', "ingest.max_body_bytes"),
        ('base_url = "ftp://x"', "base_url"),
    ],
)
def test_invalid_config_names_the_key(tmp_path: Path, toml: str, key: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    assert f": {key}:" in str(info.value)


def test_invalid_env_value_is_named() -> None:
    with pytest.raises(ConfigError, match="addr"):
        load_config(env={"SWITCHBOARD_ADDR": "localhost"})


def test_missing_and_broken_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.toml", env={})
    bad = tmp_path / "bad.toml"
    bad.write_text("[unclosed")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad, env={})
