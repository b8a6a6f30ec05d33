"""Configuration: defaults, TOML, environment overrides, and errors that name the key."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from platformdirs import user_data_dir
from psycopg.conninfo import conninfo_to_dict
from sbtest import (
    SWITCHBOARD,
    assert_log_has_no_secrets,
    free_port,
    make_env,
    stop_process_group,
)

from switchboard.config import Config, load_config
from switchboard.errors import ConfigError
from switchboard.runtime import Runtime
from switchboard.secrets_box import SecretBox
from switchboard.service import identity, todos, webhooks


def _wait_healthy(proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
    """Until ``serve`` answers /healthz 200 (its log in the failure if it exits or hangs)."""
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, log.read_text()
        try:
            health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
            break
        except httpx.TransportError:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
    assert health.status_code == 200


def test_defaults_without_file_or_env() -> None:
    cfg = load_config(env={})
    assert cfg.database_url is None
    assert cfg.base_url == "http://127.0.0.1:8080"
    assert (cfg.host, cfg.port) == ("127.0.0.1", 8080)
    assert cfg.data_dir == Path(user_data_dir("switchboard", appauthor=False))
    assert cfg.section("ingest")["max_body_bytes"] == 5 * 1024 * 1024


def test_changing_one_config_never_changes_the_defaults_of_the_next() -> None:
    first = load_config(env={})
    first.raw["ingest"]["rotation_overlap_hours"] = 0
    first.raw["server"]["workers"] = 7
    second = load_config(env={})
    assert second.section("ingest")["rotation_overlap_hours"] == 24
    assert second.section("server")["workers"] == "auto"


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
        # an empty DSN would silently mean the embedded server, not the one meant
        ('database_url = ""', "database_url"),
    ],
)
def test_invalid_config_names_the_key(tmp_path: Path, toml: str, key: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    assert f": {key}:" in str(info.value)


def test_invalid_env_value_is_named() -> None:
    with pytest.raises(ConfigError, match="^SWITCHBOARD_ADDR: must be host:port"):
        load_config(env={"SWITCHBOARD_ADDR": "localhost"})


def test_missing_and_broken_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.toml", env={})
    bad = tmp_path / "bad.toml"
    bad.write_text("[unclosed")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad, env={})


# --------------------------------------------------------------------------------------
# Every key of the README's configuration reference takes effect where it is owned.
# Covered elsewhere: database_url unset (tests/store/test_embedded.py), disabled_plugins
# (tests/test_plugins.py, tests/cli/test_send.py), server.database_timeout_ms
# (tests/test_app.py), routing.stages (tests/test_plugins.py), todos.max_attempts and
# todos.backoff_* (tests/service/test_todos.py), [plugins.cairn] freshness_seconds
# (tests/plugins/test_cairn.py), metrics.* (tests/test_metrics.py), retention.*
# (tests/service/test_retention.py), log.*
# (tests/test_delivery_log.py).
# --------------------------------------------------------------------------------------


def _toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "switchboard.toml"
    path.write_text(text)
    return path


@asynccontextmanager
async def _opened(config: Config) -> AsyncIterator[Runtime]:
    rt = Runtime(config)
    await rt.open_store(migrate=False)
    try:
        yield rt
    finally:
        await rt.shutdown()


async def test_base_url_builds_ingest_and_mcp_urls(dsn: str, tmp_path: Path) -> None:
    path = _toml(tmp_path, 'base_url = "https://sb.example/relay/"\n')
    env = make_env(dsn, tmp_path / "data", SWITCHBOARD_CONFIG=str(path))
    async with _opened(load_config(env=env)) as rt:
        await identity.add_human(rt, "alice")
        made = await identity.vend_endpoint(
            rt, owner="alice", name="owner", queues=["inbox"], webhook_queues=["inbox"],
            source_types=["generic"], webhook_max=1,
        )  # fmt: skip
        assert made["mcp_url"] == "https://sb.example/relay/mcp"
        owner = await rt.store.get_endpoint(made["endpoint_id"])
        hook = await webhooks.create_webhook(rt, owner, "generic", "inbox")
        assert hook["ingest_url"].startswith("https://sb.example/relay/webhooks/w/")


async def test_database_url_and_pool_settings_open_the_store(dsn: str, tmp_path: Path) -> None:
    path = _toml(tmp_path, f'database_url = "{dsn}"\n[server]\npool_min_size = 1\n'
                           "pool_max_size = 3\ndatabase_timeout_ms = 700\n")  # fmt: skip
    data = tmp_path / "data"
    env = make_env(None, data, SWITCHBOARD_CONFIG=str(path))  # the DSN comes from the file
    async with _opened(load_config(env=env)) as rt:
        row = await rt.store.db.fetchone("SELECT current_database() AS name")
        assert row is not None and row["name"] == conninfo_to_dict(dsn)["dbname"]
        pool = rt.store.db.pool
        assert (pool.min_size, pool.max_size, pool.timeout) == (1, 3, 0.7)
    assert not (data / "pg").exists()  # no embedded server was started


def test_secret_key_seals_signing_secrets(tmp_path: Path) -> None:
    def box(key: str | None, data: str) -> SecretBox:
        env = {"SWITCHBOARD_DATA_DIR": str(tmp_path / data)}
        if key:
            env["SWITCHBOARD_SECRET_KEY"] = key
        return Runtime(load_config(env=env)).secrets

    sealed = box("first-key-0123456789", "a").seal("whsec_x")
    assert box("first-key-0123456789", "b").open(sealed) == "whsec_x"
    with pytest.raises(ConfigError, match="cannot be decrypted"):
        box("other-key-0123456789", "a").open(sealed)
    assert not (tmp_path / "a" / "secret.key").exists()  # a configured key is never written


def test_data_dir_holds_the_generated_secret_key(tmp_path: Path) -> None:
    def box(data: str) -> SecretBox:
        return Runtime(load_config(env={"SWITCHBOARD_DATA_DIR": str(tmp_path / data)})).secrets

    sealed = box("a").seal("whsec_x")
    assert (tmp_path / "a" / "secret.key").is_file()
    assert box("a").open(sealed) == "whsec_x"  # the next process reuses the key
    with pytest.raises(ConfigError):
        box("b").open(sealed)  # another data_dir, another key


def test_disabled_plugins_are_not_registered(tmp_path: Path) -> None:
    path = _toml(tmp_path, 'disabled_plugins = ["github"]\n')
    rt = Runtime(load_config(path, env={}))
    assert "github" not in rt.registries.sources and "gitea" in rt.registries.sources


async def test_lease_ttl_seconds_is_the_default_lease(dsn: str, tmp_path: Path) -> None:
    path = _toml(tmp_path, "[todos]\nlease_ttl_seconds = 120\n")
    env = make_env(dsn, tmp_path / "data", SWITCHBOARD_CONFIG=str(path))
    async with _opened(load_config(env=env)) as rt:
        await identity.add_human(rt, "alice")
        made = await identity.vend_endpoint(rt, owner="alice", name="me", queues=["inbox"])
        me = await identity.authenticate(rt, made["token"])
        async with rt.store.db.conn() as conn:
            await conn.execute(
                "INSERT INTO todos (endpoint_id, queue, idempotency_key, title, payload,"
                " routing_trace) VALUES (%s, 'inbox', 'k1', 't', '{}', '{\"stage\": \"default\"}')",
                (me["id"],),
            )
        claimed = await todos.claim_next(rt, me, owner="worker")
        expires = datetime.fromisoformat(str(claimed["todo"]["lease_expires_at"]))
        assert 110 < expires.timestamp() - time.time() <= 121  # not the default 300


def test_max_body_bytes_is_the_ingest_limit(server_factory: Any, dsn: str, tmp_path: Path) -> None:
    srv = server_factory(dsn, config=_toml(tmp_path, "[ingest]\nmax_body_bytes = 2048\n"))
    url = srv.base_url + "/webhooks/w/" + "0" * 48
    assert httpx.post(url, content=b"x" * 2049, timeout=30).status_code == 413
    assert httpx.post(url, content=b"x" * 2048, timeout=30).status_code == 404  # read, unknown


def test_access_log_writes_one_line_per_request(
    server_factory: Any, dsn: str, tmp_path: Path
) -> None:
    quiet = server_factory(dsn)
    loud = server_factory(dsn, config=_toml(tmp_path, "[server]\naccess_log = true\n"))
    token = "f" * 48
    for srv in (quiet, loud):
        assert httpx.get(srv.base_url + "/healthz?probe=access", timeout=30).status_code == 200
        assert (
            httpx.post(srv.base_url + f"/webhooks/w/{token}", content=b"{}", timeout=30).status_code
            == 404
        )
    deadline = time.monotonic() + 10
    while "/webhooks/w/" not in loud.log.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)  # the line is written after the response
    lines = loud.log.read_text()
    assert re.search(r"GET http://\S+/healthz\?probe=access 200 ", lines), lines
    assert re.search(r"POST http://\S+/webhooks/w/«redacted» 404 ", lines), lines
    assert token not in lines  # the ingest token is redacted like everywhere else
    assert "probe=access" not in quiet.log.read_text()


@pytest.mark.slow
def test_addr_and_workers_start_serve(dsn: str, tmp_path: Path) -> None:
    port = free_port()
    path = _toml(tmp_path, f'addr = "127.0.0.1:{port}"\n[server]\nworkers = 2\n')
    env = make_env(dsn, tmp_path / "data", SWITCHBOARD_CONFIG=str(path))
    log = tmp_path / "serve.log"
    # No --host/--port/--workers: `serve` takes all three from the config.
    with open(log, "ab") as out:
        proc = subprocess.Popen([*SWITCHBOARD, "serve"], env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        try:
            _wait_healthy(proc, port, log)
            workers = [
                child for child in psutil.Process(proc.pid).children()
                if "spawn_main" in " ".join(child.cmdline())
            ]  # fmt: skip
            assert len(workers) >= 2, log.read_text()  # with workers = 1, one process serves
            assert f"serving on http://127.0.0.1:{port} (2 worker(s))" in log.read_text()
        finally:
            stop_process_group(proc)
    assert_log_has_no_secrets(log)


#: A plugin whose second worker to start never finishes starting: one worker serves, the
#: other has not acknowledged its start when the signal comes.
_SLOW_SECOND = """
import os, time
from switchboard.plugin import hookimpl

@hookimpl
def switchboard_startup(runtime):
    try:
        os.close(os.open(os.environ["SLOW_SECOND_MARK"], os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        time.sleep(120)
"""


def _slow_second_plugin(root: Path) -> Path:
    """A one-module distribution on its own path entry (metadata and entry point by hand)."""
    root.mkdir()
    (root / "slow_second.py").write_text(_SLOW_SECOND)
    meta = root / "slow_second-0.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: slow-second\nVersion: 0\n")
    (meta / "entry_points.txt").write_text("[switchboard]\nslow_second = slow_second\n")
    return root


def test_sigterm_while_a_worker_starts_stops_serve(dsn: str, tmp_path: Path) -> None:
    """Sanic's manager, signalled while a worker had not acknowledged its start, re-read
    its own stop message forever at full CPU and never exited (serve patches that wait)."""
    port = free_port()
    site = _slow_second_plugin(tmp_path / "site")
    env = make_env(
        dsn,
        tmp_path / "data",
        PYTHONPATH=str(site),
        SLOW_SECOND_MARK=str(tmp_path / "first-started"),
    )
    log = tmp_path / "serve.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen([*SWITCHBOARD, "serve", "--port", str(port), "--workers", "2"],
                                env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while True:  # the first worker serves; the second is still starting
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).is_success:
                        break
                except httpx.TransportError:
                    time.sleep(0.1)
            workers = [
                c
                for c in psutil.Process(proc.pid).children()
                if "spawn_main" in " ".join(c.cmdline())
            ]
            assert len(workers) >= 2, workers
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                pytest.fail(f"serve did not stop within 30 s of SIGTERM:\n{log.read_text()}")
            alive = psutil.wait_procs(workers, timeout=10)[1]
            assert not alive, alive
        finally:
            stop_process_group(proc)


@pytest.mark.parametrize(
    ("server", "cpus", "flag", "expected"),
    [
        ("", 1, None, (1, 2, 20)),
        ("", 2, None, (2, 2, 20)),
        ("", 4, None, (4, 2, 10)),
        ("", 16, None, (16, 2, 3)),  # 40 connections in all stop at 3 per worker
        ("", 2, 8, (8, 2, 5)),  # the flag wins over the CPUs, and sizes the pools
        ("workers = 3\n", 16, None, (3, 2, 13)),
        ("pool_max_size = 1\n", 2, None, (2, 1, 1)),  # an auto min never exceeds a set max
        ("pool_min_size = 30\n", 2, None, (2, 30, 30)),  # nor an auto max a set min
        ("workers = 2\npool_min_size = 4\npool_max_size = 9\n", 8, None, (2, 4, 9)),
    ],
)
def test_server_sizes_follow_the_cpus_unless_set(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    server: str,
    cpus: int,
    flag: int | None,
    expected: tuple[int, int, int],
) -> None:
    import switchboard.config as config

    monkeypatch.setattr(config.os, "sched_getaffinity", lambda pid: set(range(cpus)), raising=False)
    sizes = config.server_sizes(
        load_config(_toml(tmp_path, "[server]\n" + server), env={}), flag, env={}
    )
    assert (sizes.workers, sizes.pool_min, sizes.pool_max) == expected
    # A worker process learns the count serve chose from the environment.
    again = config.server_sizes(
        load_config(_toml(tmp_path, "[server]\n" + server), env={}),
        env={config.WORKERS_ENV: str(sizes.workers)},
    )
    assert (again.workers, again.pool_max) == (sizes.workers, sizes.pool_max)


def test_usable_cpus_is_the_affinity_not_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    import switchboard.config as config

    monkeypatch.setattr(config.os, "sched_getaffinity", lambda pid: {3}, raising=False)
    monkeypatch.setattr(config.os, "cpu_count", lambda: 64)
    assert config.usable_cpus() == 1

    def unsupported(pid: int) -> set[int]:
        raise AttributeError

    monkeypatch.setattr(config.os, "sched_getaffinity", unsupported, raising=False)
    assert config.usable_cpus() == 64
    monkeypatch.setattr(config.os, "cpu_count", lambda: None)
    assert config.usable_cpus() == 1


@pytest.mark.parametrize("value", ['"many"', "0", "65"])
def test_workers_is_auto_or_a_count(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError, match="server.workers"):
        load_config(_toml(tmp_path, f"[server]\nworkers = {value}\n"), env={})


def test_serve_defaults_to_a_worker_per_usable_cpu(dsn: str, tmp_path: Path) -> None:
    """No --workers, no [server] workers: serve runs one worker per CPU it may use, and
    says so; pinned to one CPU, that is one process with the one-worker pool sizes."""
    import os

    port = free_port()
    env = make_env(dsn, tmp_path / "data")
    log = tmp_path / "serve.log"
    cpu = min(os.sched_getaffinity(0))
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [*SWITCHBOARD, "serve", "--port", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=lambda: os.sched_setaffinity(0, {cpu}),
        )
        try:
            _wait_healthy(proc, port, log)
            assert not [
                c
                for c in psutil.Process(proc.pid).children()
                if "spawn_main" in " ".join(c.cmdline())
            ]
            text = log.read_text()
            assert (
                f"serving on http://127.0.0.1:{port} (1 worker(s)): workers auto, 1 usable"
                " CPU(s); database pool 2-20 connections per worker (auto), at most 20"
                " in all"
            ) in text, text
        finally:
            stop_process_group(proc)
    assert_log_has_no_secrets(log)
