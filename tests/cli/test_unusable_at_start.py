"""What ``serve`` (and a command on the database) cannot use at start is one line on stderr
naming it, the README's exit code (2: the value must change, 1: the world is in the way), no
traceback, and nothing left running: no worker, no embedded PostgreSQL.

Every resource is real: a listener holding the port, a read-only mount, a regular file, a
port nothing listens on."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from sbtest import CLI, SWITCHBOARD, free_port, make_env, session_of, stop_process_group
from sbworld import World, vended_endpoint

from switchboard.runtime import Runtime
from switchboard.store.dsn import dsn_where

#: How long a start that should be refused may take (a refusal is immediate; a start that
#: was not refused would serve until stopped).
REFUSED_WITHIN_S = 60
#: A password that must never reach stderr.
PASSWORD = "hunter2-not-shown"


def refused(env: dict[str, str], *args: str, data: Path | None = None) -> tuple[int, str]:
    """``switchboard ARGS`` run to its end: ``(exit code, stderr)``, after checking it left
    no process of its session and no embedded PostgreSQL under ``data`` running."""
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [*SWITCHBOARD, *args],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
        )
        code: int | None = None
        with contextlib.suppress(subprocess.TimeoutExpired):
            code = proc.wait(REFUSED_WITHIN_S)
        left = session_of(proc.pid)  # before anything is stopped here
        stop_process_group(proc)  # nothing to stop after a refusal; else a start that was not
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    assert code is not None, f"switchboard {' '.join(args)} was not refused:\n{stderr[-3000:]}"
    assert not left, f"left running after a refused start: {left}\n{stderr}"
    if data is not None:
        # pg_ctl puts the postmaster in a session of its own: its pid file says if it runs
        assert not (data / "pg" / "postmaster.pid").exists(), stderr
    assert "Traceback" not in stderr, stderr
    assert PASSWORD not in stderr, stderr
    return code, stderr


def last_line(stderr: str) -> str:
    return [ln for ln in stderr.splitlines() if ln.strip()][-1]


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port another process's listener holds (as Sanic binds: SO_REUSEADDR, listening)."""
    with holding() as port:
        yield port


@contextlib.contextmanager
def holding(*, reuse_port: bool = False) -> Iterator[int]:
    """A listener on a free port; ``reuse_port``: with ``SO_REUSEPORT``, as the workers of a
    multi-worker ``serve`` listen (a second one must not bind beside them)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A directory no file can be created in, and the OS's reason: a read-only tmpfs
    mounted there (as root), else a directory without write permission."""
    path = tmp_path / "ro"
    path.mkdir()
    if os.geteuid() != 0:
        path.chmod(0o555)
        yield path, "permission denied"
        path.chmod(0o755)
        return
    mount = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if mount.returncode != 0:
        pytest.skip(f"no read-only mount here: {mount.stderr.strip()}")
    try:
        yield path, "read-only file system"
    finally:
        subprocess.run(["umount", str(path)], check=True)


# -- flags refused before anything starts -----------------------------------------------


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("--port", "70000"), "argument --port: 70000 is out of range: a port is 0 to 65535"),
        (("--port", "-1"), "argument --port: -1 is out of range: a port is 0 to 65535"),
        (("--workers", "0"), "argument --workers: must be at least 1 (1 to 64;"),
        (("--workers", "-1"), "argument --workers: must be at least 1 (1 to 64;"),
        (("--workers", "65"), "argument --workers: must be at most 64"),
    ],
)
def test_an_out_of_range_port_or_worker_count_is_refused_before_anything_starts(
    tmp_path: Path, args: tuple[str, ...], error: str
) -> None:
    data = tmp_path / "data"
    code, stderr = refused(make_env(None, data), "serve", *args, data=data)
    assert code == 2
    assert last_line(stderr).startswith(f"switchboard serve: error: {error}"), stderr
    assert not data.exists(), "a database was made for a refused flag"


# -- the address is taken ---------------------------------------------------------------


@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("reuse_port", [False, True], ids=["plain", "SO_REUSEPORT"])
def test_a_port_in_use_is_one_line_and_nothing_is_started(
    tmp_path: Path, workers: str, reuse_port: bool
) -> None:
    if reuse_port and not hasattr(socket, "SO_REUSEPORT"):
        pytest.skip("no SO_REUSEPORT here")
    data = tmp_path / "data"
    env = make_env(None, data)
    with holding(reuse_port=reuse_port) as port:
        code, stderr = refused(env, "serve", "--port", str(port), "--workers", workers, data=data)
    assert code == 1
    assert stderr.splitlines() == [
        f"switchboard: error: cannot listen on 127.0.0.1:{port}: address already in use"
    ]


def test_a_metrics_addr_in_use_stops_the_start_and_the_embedded_postgres(
    tmp_path: Path, held_port: int
) -> None:
    data = tmp_path / "data"
    conf = tmp_path / "switchboard.toml"
    conf.write_text(f'[metrics]\naddr = "127.0.0.1:{held_port}"\n')
    env = make_env(None, data, SWITCHBOARD_CONFIG=str(conf))
    code, stderr = refused(env, "serve", "--port", str(free_port()), "--workers", "2", data=data)
    assert code == 1
    assert (data / "pg" / "PG_VERSION").exists()  # it was started, then stopped
    assert last_line(stderr) == (
        f"switchboard: error: cannot listen on 127.0.0.1:{held_port} ([metrics] addr):"
        " address already in use"
    )


# -- the database URL -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("garbage here", "it is neither a postgresql:// URL nor key=value settings"),
        ("http://example.com/", "its scheme is http://, not postgresql://"),
        (f"http://sb:{PASSWORD}@example.com/", "its scheme is http://, not postgresql://"),
        (f"postgresql://sb:{PASSWORD}@127.0.0.1:abc/db", "its port 'abc' is not a number"),
        (f"postgresql://sb:{PASSWORD}@127.0.0.1:99999/db", "its port 99999 is not from 1 to 65535"),
        # libpq's reason, naming what it could not read (never the password)
        (
            f"postgresql://sb:{PASSWORD}@127.0.0.1/db?sslmod=require",
            'libpq cannot read it: invalid URI query parameter: "sslmod"',
        ),
        (
            f"postgresql://sb:{PASSWORD}@[bad/db",
            'libpq cannot read it: end of string reached when looking for matching "]" in IPv6'
            ' host address in URI: "…"',
        ),
        (
            f"postgresql://sb:{PASSWORD}%zz@127.0.0.1/db",
            'libpq cannot read it: invalid percent-encoded token: "…"',
        ),
        ("postgresql://sb@%zz/db", 'libpq cannot read it: invalid percent-encoded token: "%zz"'),
        (
            f"dbname=db bogus=1 password={PASSWORD}",
            'libpq cannot read it: invalid connection option "bogus"',
        ),
    ],
)
@pytest.mark.parametrize("command", [("human", "list"), ("serve", "--port", "0")])
def test_a_database_url_that_is_no_postgresql_url_is_a_config_error(
    tmp_path: Path, url: str, why: str, command: tuple[str, ...]
) -> None:
    env = make_env(url, tmp_path / "data")
    code, stderr = refused(env, *command)
    assert code == 2
    assert stderr.splitlines() == [
        f"switchboard: error: SWITCHBOARD_DATABASE_URL is not a PostgreSQL URL: {why}"
        + (
            " (expected postgresql://USER:PASSWORD@HOST:PORT/DATABASE or host=... dbname=...)"
            if "port" not in why
            else ""
        )
    ]


def test_database_url_in_the_config_file_is_named_as_such(tmp_path: Path) -> None:
    conf = tmp_path / "switchboard.toml"
    conf.write_text('database_url = "garbage"\n')
    env = make_env(None, tmp_path / "data", SWITCHBOARD_CONFIG=str(conf))
    code, stderr = refused(env, "human", "list")
    assert code == 2
    assert last_line(stderr).startswith(
        f"switchboard: error: database_url in {conf} is not a PostgreSQL URL: "
    )


@pytest.mark.parametrize("command", [("human", "list"), ("serve", "--port", "0")])
def test_a_database_that_refuses_connections_is_the_store_unavailable(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    port = free_port()  # nothing listens there
    env = make_env(f"postgresql://sb:{PASSWORD}@127.0.0.1:{port}/db", tmp_path / "data")
    code, stderr = refused(env, *command)
    assert code == 1
    assert stderr.splitlines() == [
        "switchboard: error: the database is unavailable: cannot connect to "
        f"127.0.0.1:{port}/db (SWITCHBOARD_DATABASE_URL): connection refused"
    ]


# -- the data dir -----------------------------------------------------------------------


def _unusable(tmp_path: Path, kind: str, read_only: tuple[Path, str]) -> tuple[Path, str]:
    """A data dir of ``kind`` that cannot be used, and the end of the line saying why."""
    if kind == "read-only":
        return read_only[0] / "sb", f"cannot create it: {read_only[1]}"
    if kind == "a file":
        path = tmp_path / "afile"
        path.write_text("not a directory\n")
        return path, "it is a file, not a directory"
    return Path("/proc/sbtest"), "cannot create it: no such file or directory"


@pytest.mark.parametrize("kind", ["read-only", "a file", "/proc"])
def test_serve_on_a_data_dir_it_cannot_use_is_one_line_naming_it(
    tmp_path: Path, read_only_dir: tuple[Path, str], kind: str
) -> None:
    data, why = _unusable(tmp_path, kind, read_only_dir)
    env = make_env(None, data)
    code, stderr = refused(env, "serve", "--port", "0", "--workers", "2")
    assert code == 2
    assert stderr.splitlines() == [
        f"switchboard: error: cannot use data_dir {data} (from SWITCHBOARD_DATA_DIR): {why}"
    ]


def test_an_existing_read_only_data_dir_is_one_line_too(
    tmp_path: Path, read_only_dir: tuple[Path, str]
) -> None:
    """The directory is there, its ``pg`` cannot be made in it."""
    data, reason = read_only_dir
    code, stderr = refused(make_env(None, data), "serve", "--port", "0")
    assert code == 2
    assert stderr.splitlines() == [
        f"switchboard: error: cannot use data_dir {data} (from SWITCHBOARD_DATA_DIR): "
        f"cannot make pg in it: {reason}"
    ]


KEY_HINT = "it keeps the generated secret.key: make it writable, or set SWITCHBOARD_SECRET_KEY"


def _without_key(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k != "SWITCHBOARD_SECRET_KEY"}


@pytest.mark.parametrize("kind", ["read-only", "a file"])
def test_webhook_create_where_the_secret_key_cannot_be_kept(
    tmp_path: Path, dsn: str, read_only_dir: tuple[Path, str], kind: str
) -> None:
    """An external database: the data dir only keeps the generated key, which sealing the
    new webhook's signing secret needs."""
    w = World(CLI(make_env(dsn, tmp_path / "data")))
    w.human("alice")
    endpoint = w.endpoint("alice", "owner")["endpoint_id"]
    data, why = _unusable(tmp_path, kind, read_only_dir)
    env = _without_key(make_env(dsn, data))
    code, stderr = refused(
        env, "webhook", "create", "--endpoint", endpoint, "--source", "github",
        "--target-queue", "inbox",
    )  # fmt: skip
    assert code == 2
    assert stderr.splitlines() == [
        f"switchboard: error: cannot use data_dir {data} (from SWITCHBOARD_DATA_DIR): "
        f"{why}; {KEY_HINT}"
    ]


@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_loads_the_secret_key_at_start_not_at_the_first_delivery(
    tmp_path: Path, dsn: str, read_only_dir: tuple[Path, str], workers: str
) -> None:
    """With the console disabled nothing else reads the key at start: serve used to come up
    healthy and answer the first signed delivery 500."""
    conf = tmp_path / "switchboard.toml"
    conf.write_text('disabled_plugins = ["console"]\n')
    data, why = _unusable(tmp_path, "read-only", read_only_dir)
    env = _without_key(make_env(dsn, data, SWITCHBOARD_CONFIG=str(conf)))
    code, stderr = refused(env, "serve", "--port", "0", "--workers", workers)
    assert code == 2
    assert stderr.splitlines() == [
        f"switchboard: error: cannot use data_dir {data} (from SWITCHBOARD_DATA_DIR): "
        f"{why}; {KEY_HINT}"
    ]


# -- the secret key ---------------------------------------------------------------------


@pytest.mark.parametrize("given", ["env", "config", "file"])
async def test_a_secret_key_that_opens_no_stored_signing_secret_stops_the_start(
    runtime: Runtime, dsn: str, tmp_path: Path, given: str
) -> None:
    """The key is checked at start against what it sealed, not at the first signed delivery
    (whose producer would be answered 500), and where it came from is named."""
    from switchboard.service import identity, webhooks

    await identity.add_human(runtime, "alice")
    owner = await vended_endpoint(
        runtime, "alice", "router", ["inbox"], webhook_queues=["inbox"],
        source_types=["github"], webhook_max=1,
    )  # fmt: skip
    await webhooks.create_webhook(runtime, owner, "github", "inbox")  # sealed with the test key
    data = tmp_path / "other-data"
    env = make_env(dsn, data)
    other = "another-secret-key-0123456789"
    if given == "env":
        env["SWITCHBOARD_SECRET_KEY"], named = other, "SWITCHBOARD_SECRET_KEY"
    elif given == "config":
        conf = tmp_path / "switchboard.toml"
        conf.write_text(f'secret_key = "{other}"\n')
        del env["SWITCHBOARD_SECRET_KEY"]
        env["SWITCHBOARD_CONFIG"], named = str(conf), f"config file {conf}: secret_key"
    else:
        data.mkdir()
        (data / "secret.key").write_text(other + "\n")
        del env["SWITCHBOARD_SECRET_KEY"]
        named = str(data / "secret.key")
    code, stderr = refused(env, "serve", "--port", "0", "--workers", "1")
    assert code == 2, stderr
    assert last_line(stderr) == (
        f"switchboard: error: the secret key from {named} does not open the signing secrets"
        f" stored in the database (external {dsn_where(dsn)}): they were sealed with another"
        " key; give the key they were sealed with (SWITCHBOARD_SECRET_KEY, secret_key, or the"
        " data dir's secret.key), else every signed delivery fails"
    )
    assert other not in stderr


async def test_a_key_that_opens_only_some_stored_secrets_is_a_warning(
    runtime: Runtime, dsn: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Secrets sealed under another key since (a key changed, then a webhook made): the key
    that opens the others serves, and the ones it cannot open are counted in the log."""
    from switchboard.cli.serve import check_secret_key
    from switchboard.config import load_config
    from switchboard.errors import ConfigError
    from switchboard.service import identity, webhooks

    await check_secret_key(runtime, dsn)  # no webhook yet: nothing to check
    await identity.add_human(runtime, "alice")
    owner = await vended_endpoint(
        runtime, "alice", "router", ["inbox"], webhook_queues=["inbox"],
        source_types=["github"], webhook_max=2,
    )  # fmt: skip
    await webhooks.create_webhook(runtime, owner, "github", "inbox")
    await check_secret_key(runtime, dsn)  # the key that sealed it
    env = make_env(dsn, tmp_path / "data", SWITCHBOARD_SECRET_KEY="another-secret-key-0123456789")
    other = Runtime(load_config(env=env))
    with pytest.raises(ConfigError, match="^the secret key from SWITCHBOARD_SECRET_KEY does not"):
        await check_secret_key(other, dsn)
    await other.open_store(migrate=False)
    try:
        await webhooks.create_webhook(other, owner, "github", "inbox")
    finally:
        await other.shutdown()
    with caplog.at_level("WARNING", logger="switchboard.serve"):
        await check_secret_key(runtime, dsn)
    assert caplog.messages == [
        "the secret key from SWITCHBOARD_SECRET_KEY does not open 1 of the 2 newest stored"
        " signing secrets: deliveries to those webhooks fail until they are rotated"
    ]
