"""An operator's config mistake stops start-up: exit 2, one line naming where the value came
from (the file or the environment variable), the key, what it must be and what was given."""

from __future__ import annotations

from pathlib import Path

import pytest
from sbtest import make_env, run_in_process

from switchboard.config import load_config
from switchboard.errors import ConfigError
from switchboard.runtime import Runtime

URL_FORM = (
    "must be an http:// or https:// URL with a host, a port from 1 to 65535 if any,"
    " and no query or fragment"
)

# (the config file, what follows "config file PATH: " in the message)
FILE_CASES = [
    (
        'addr = "127.0.0.1:99999"\n',
        "addr: must be host:port with a port from 0 to 65535 (0: any free port)"
        ' (got "127.0.0.1:99999")',
    ),
    (
        '[metrics]\naddr = "127.0.0.1:70000"\n',
        "metrics.addr: must be host:port with a port from 0 to 65535 (0: any free port)"
        ' (got "127.0.0.1:70000")',
    ),
    (
        'base_url = "http://example.com:99999"\n',
        f'base_url: {URL_FORM} (got "http://example.com:99999": the port is not a number from'
        " 1 to 65535)",
    ),
    (
        'base_url = "http://example.com:abc"\n',
        f'base_url: {URL_FORM} (got "http://example.com:abc": the port is not a number from'
        " 1 to 65535)",
    ),
    # the URLs handed out are base_url + a path: a query or fragment would swallow it
    (
        'base_url = "http://x/?a=1"\n',
        f'base_url: {URL_FORM} (got "http://x/?…": the path would end in its query or'
        " fragment, not /webhooks/… or /mcp)",
    ),
    (
        'base_url = "http://x/#f"\n',
        f'base_url: {URL_FORM} (got "http://x/#…": the path would end in its query or'
        " fragment, not /webhooks/… or /mcp)",
    ),
    (
        'base_url = "http://a b/"\n',
        f'base_url: {URL_FORM} (got "http://a b/": it has a space or a control character)',
    ),
    (
        'base_url = "http://x:/"\n',
        f'base_url: {URL_FORM} (got "http://x:/": the port is not a number from 1 to 65535)',
    ),
    (
        'addr = "a b:80"\n',
        'addr: must be host:port with a host name or IPv4 address (got "a b:80": the host'
        " has a character no host name has)",
    ),
    (
        '[metrics]\naddr = "a/b:9100"\n',
        'metrics.addr: must be host:port with a host name or IPv4 address (got "a/b:9100":'
        " the host has a character no host name has)",
    ),
    # NaN passes a schema's minimum and maximum (every comparison with it is false)
    (
        "[retention]\ninterval_s = nan\n",
        "retention.interval_s: must be a finite number (got nan)",
    ),
    (
        "[ingest]\nrotation_overlap_hours = nan\n",
        "ingest.rotation_overlap_hours: must be a finite number (got nan)",
    ),
    (
        "[server]\nshutdown_grace_s = -nan\n",
        "server.shutdown_grace_s: must be a finite number (got nan)",
    ),
    (
        "[plugins.rules]\nhistory_deadline_s = nan\n",
        "plugins.rules.history_deadline_s: must be a finite number (got nan)",
    ),
    (
        '[[plugins.llm.providers]]\ntype = "openai"\nbase_url = "http://x"\ntemperature = nan\n',
        "plugins.llm.providers[0].temperature: must be a finite number (got nan)",
    ),
    # a setting no schema bounds above: inf is refused as nan is
    ("[plugins.rules]\nx = [1.0, inf]\n", "plugins.rules.x[1]: must be a finite number (got inf)"),
    (
        "[server]\npool_min_size = 10\npool_max_size = 5\n",
        "server.pool_min_size: must not be above server.pool_max_size"
        " (got pool_min_size = 10, pool_max_size = 5)",
    ),
    (
        "[todos]\nbackoff_max_seconds = 2\n",  # below the default base, 5
        "todos.backoff_max_seconds: must not be below todos.backoff_base_seconds"
        " (got backoff_max_seconds = 2, backoff_base_seconds = 5.0: its default)",
    ),
    (
        "[todos]\nbackoff_base_seconds = 60\nbackoff_max_seconds = 30\n",
        "todos.backoff_base_seconds: must not be above todos.backoff_max_seconds"
        " (got backoff_base_seconds = 60, backoff_max_seconds = 30)",
    ),
    ("[server]\nworkers = 0\n", "server.workers: must be at least 1 (got 0)"),
    (
        'base_url = "example.com"\n',
        'base_url: must be an http:// or https:// URL (got "example.com")',
    ),
    (
        "base_url = 1979-05-27T07:32:00Z\n",
        "base_url: must be a string (got the date-time 1979-05-27T07:32:00+00:00)",
    ),
    ("data_dir = 5\n", "data_dir: must be a string (got 5)"),
    ("server = [1, 2]\n", "server: must be a table (got an array)"),
    (
        '[log]\nlevel = "verbose"\n',
        'log.level: must be one of "debug", "info", "warning", "error", "critical" (got "verbose")',
    ),
    # a secret is told by its length, never quoted back
    (
        'secret_key = "hunter2"\n',
        "secret_key: must be at least 16 characters (got a string of 7 characters)",
    ),
    # not a string, still a secret
    (
        "secret_key = 98765432109876543210\n",
        "secret_key: must be a string (got a number of 20 characters)",
    ),
    ("database_url = 12345\n", "database_url: must be a string (got a number of 5 characters)"),
    ("secret_key = 1.5e300\n", "secret_key: must be a string (got a number of 8 characters)"),
    (
        "[server]\nworkers = true\n",
        'server.workers: matches none of the allowed forms: must be "auto"; or must be an'
        " integer (got true)",
    ),
]


@pytest.mark.parametrize(("toml", "told"), FILE_CASES, ids=[c[0].strip()[:40] for c in FILE_CASES])
def test_a_file_mistake_names_the_file_the_key_and_the_value(
    tmp_path: Path, toml: str, told: str
) -> None:
    path = tmp_path / "x.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    assert str(caught.value) == f"config file {path}: {told}"


def test_a_long_value_is_shortened(tmp_path: Path) -> None:
    path = tmp_path / "x.toml"
    path.write_text(f'base_url = "{"h" * 100}"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    assert str(caught.value).endswith(f'(got "{"h" * 59}…")')


@pytest.mark.parametrize(
    ("env", "told"),
    [
        (
            {"SWITCHBOARD_BASE_URL": "example.com"},
            'SWITCHBOARD_BASE_URL: must be an http:// or https:// URL (got "example.com")',
        ),
        (
            {"SWITCHBOARD_ADDR": "0.0.0.0:65536"},
            "SWITCHBOARD_ADDR: must be host:port with a port from 0 to 65535 (0: any free port)"
            ' (got "0.0.0.0:65536")',
        ),
        (
            {"SWITCHBOARD_SECRET_KEY": "short"},
            "SWITCHBOARD_SECRET_KEY: must be at least 16 characters (got a string of 5 characters)",
        ),
    ],
)
def test_an_environment_mistake_names_the_variable(env: dict[str, str], told: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(env=env)
    assert str(caught.value) == told


def test_an_ephemeral_port_is_still_allowed(tmp_path: Path) -> None:
    path = tmp_path / "x.toml"
    path.write_text('addr = "127.0.0.1:0"\n[metrics]\naddr = "127.0.0.1:0"\n')
    assert load_config(path, env={}).port == 0


@pytest.mark.parametrize("plugin", ["github", "gitea", "generic", "doorbell", "hmac"])
def test_a_plugin_without_settings_refuses_a_section(tmp_path: Path, plugin: str) -> None:
    path = tmp_path / "x.toml"
    path.write_text(f"[plugins.{plugin}]\nbogus = 1\n")
    with pytest.raises(ConfigError) as caught:
        Runtime(load_config(path, env={}))
    assert str(caught.value) == (
        f"config file {path}: plugins.{plugin}: the {plugin} plugin takes no settings"
        f" (got bogus); remove the [plugins.{plugin}] section"
    )


def test_an_empty_section_of_a_plugin_without_settings_is_fine(tmp_path: Path) -> None:
    path = tmp_path / "x.toml"
    path.write_text("[plugins.github]\n")
    Runtime(load_config(path, env={}))


def test_a_disabled_plugins_section_is_checked_against_its_schema(tmp_path: Path) -> None:
    path = tmp_path / "x.toml"
    path.write_text('disabled_plugins = ["llm"]\n[plugins.llm]\nmode = "inline"\nbogus = 1\n')
    with pytest.raises(ConfigError) as caught:
        Runtime(load_config(path, env={}))
    assert str(caught.value) == f"config file {path}: plugins.llm.bogus: unknown key"
    path.write_text('disabled_plugins = ["llm", "github"]\n[plugins.llm]\nmode = "inline"\n')
    Runtime(load_config(path, env={}))  # a valid section of a disabled plugin is fine
    path.write_text('disabled_plugins = ["github"]\n[plugins.github]\nbogus = 1\n')
    with pytest.raises(ConfigError, match="the github plugin takes no settings"):
        Runtime(load_config(path, env={}))


def _one_line_exit_2(args: tuple[str, ...], tmp_path: Path, **env: str) -> str:
    proc = run_in_process((*args, "plugins"), make_env(None, tmp_path / "data", **env))
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr and proc.stdout == "", proc.stderr
    return lines[0]


def test_a_directory_is_no_config_file(tmp_path: Path) -> None:
    told = f"switchboard: error: config file {tmp_path}: is a directory, not a file"
    assert _one_line_exit_2(("--config", str(tmp_path)), tmp_path) == told
    assert _one_line_exit_2((), tmp_path, SWITCHBOARD_CONFIG=str(tmp_path)) == told


def test_a_file_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.toml"
    path.write_bytes(b'base_url = "http://\xff\xfe"\n')
    assert _one_line_exit_2(("--config", str(path)), tmp_path) == (
        f"switchboard: error: config file {path}: is not UTF-8 text (byte 0xff at offset 19);"
        " TOML files are UTF-8"
    )


def test_an_empty_config_flag_is_refused(tmp_path: Path) -> None:
    assert _one_line_exit_2(("--config", ""), tmp_path) == (
        "switchboard: error: --config: must be the path of a TOML file (got an empty string)"
    )


@pytest.mark.parametrize(("opening", "closing"), [("[", "]"), ("{b = ", "}")])
def test_a_config_that_nests_too_deeply_is_refused(
    tmp_path: Path, opening: str, closing: str
) -> None:
    path = tmp_path / "x.toml"
    path.write_text(f"a = {opening * 1000}1{closing * 1000}\n")
    assert _one_line_exit_2(("--config", str(path)), tmp_path) == (
        f"switchboard: error: config file {path}: nests too deeply (arrays or tables inside"
        " each other)"
    )


def test_an_env_base_url_with_a_query_is_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(env={"SWITCHBOARD_BASE_URL": "http://x/?a=1"})
    assert str(caught.value) == (
        f'SWITCHBOARD_BASE_URL: {URL_FORM} (got "http://x/?…": the path would end in its'
        " query or fragment, not /webhooks/… or /mcp)"
    )
