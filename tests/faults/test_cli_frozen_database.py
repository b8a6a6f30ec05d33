"""Commands and ``serve``'s start against a frozen PostgreSQL (SIGSTOP: it accepts, it never
answers): each ends within the store's deadline with one line naming the database, exit 1,
no traceback, nothing left running; Ctrl-C while one waits on it exits 130, quietly.

Measured on a loaded 2-core machine: a command or ``serve`` frozen before it connects ends
in 2.6-3.1 s (``no answer within 2 s``); one frozen while a statement waits, 4.1-4.3 s after
the freeze (the 2 s deadline, then the pool's reconnect attempt, 2 s too); Ctrl-C 0.2 s
after the signal before it connected, 2.0 s (serve at its migrations) and 4.3 s (a command
on a pooled statement) after. Before, every one of them waited forever, and Ctrl-C took 5
to 7 s and printed psycopg's warnings about a cancel the frozen server never answered.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from sbfaults import PrivatePostgres
from sbtest import SWITCHBOARD, as_a_terminal_job, make_env, session_of, stop_process_group

from switchboard.store.migrate import MIGRATION_LOCK

pytestmark = pytest.mark.slow

#: A frozen database's outcome comes within this (measured: 2.6-4.1 s; the machine is slow).
ENDS_WITHIN_S = 15
#: The statement deadline of the tests that freeze a command while it waits on a statement:
#: past the default's 2 s, so that the freeze comes before it even on a slow machine.
STATEMENT_MS = 3000
#: Ctrl-C on serve waiting at its migrations ends it within this: within what is left of
#: the statement's 2 s deadline (measured 1.9 s), where psycopg's cancel request alone
#: waited 5 s on a frozen server.
CTRL_C_WITHIN_S = 4.5
#: A password that must never reach stderr.
PASSWORD = "hunter2-not-shown"


@dataclass
class Outcome:
    code: int | None
    took: float
    stderr: str
    left: list[int]


@pytest.fixture(scope="module")
def frozen_dsn(private_pg: PrivatePostgres) -> str:
    """One migrated database for the module (each test freezes the whole server)."""
    return private_pg.migrated_database(f"sb_cli_frozen{os.getpid()}")


def _run(
    env: dict[str, str],
    *args: str,
    when_waiting: Callable[[subprocess.Popen[bytes]], None] | None = None,
    then: Callable[[subprocess.Popen[bytes]], None] | None = None,
) -> Outcome:
    """``switchboard ARGS`` in a session of its own: ``when_waiting(proc)`` returns once it
    waits on the database, ``then(proc)`` acts (a signal); how it ended, timed from then."""
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [*SWITCHBOARD, *args],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
            preexec_fn=as_a_terminal_job,
        )
        code: int | None = None
        try:
            if when_waiting is not None:
                when_waiting(proc)
            if then is not None:
                then(proc)
            started = time.monotonic()
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = proc.wait(ENDS_WITHIN_S)
            took = time.monotonic() - started
            left = session_of(proc.pid)
        finally:
            stop_process_group(proc, grace=1)
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    return Outcome(code, took, stderr, left)


def _waiting_on(dsn: str, proc: subprocess.Popen[bytes], where: str) -> None:
    """Returns once another session of ``dsn``'s database waits as ``where`` says (an SQL
    condition on ``pg_stat_activity``)."""
    deadline = time.monotonic() + 30
    with psycopg.connect(dsn, autocommit=True) as watch:
        while time.monotonic() < deadline and proc.poll() is None:
            row = watch.execute(
                "SELECT count(*) FROM pg_stat_activity"
                f" WHERE datname = current_database() AND pid <> pg_backend_pid() AND {where}"
            ).fetchone()
            if row and row[0]:
                return
            time.sleep(0.02)
    raise AssertionError(f"the command never waited on the database (exit {proc.poll()})")


def _assert_one_line(out: Outcome, line: str, *, code: int = 1) -> None:
    assert out.code == code, (out.code, out.took, out.stderr[-2000:])
    assert out.took < ENDS_WITHIN_S, out
    assert "Traceback" not in out.stderr, out.stderr
    assert PASSWORD not in out.stderr, out.stderr
    assert out.stderr.splitlines() == [line], out.stderr
    assert not out.left, f"left running: {out.left}\n{out.stderr}"


def _where(pg: PrivatePostgres, dsn: str) -> str:
    return f"socket in {pg.pgdata} (port 5432), database {conninfo_to_dict(dsn)['dbname']}"


@pytest.fixture
def holding(frozen_dsn: str) -> Iterator[Callable[[str], None]]:
    """``hold(sql)``: a session of its own runs ``sql`` in a transaction left open (a lock
    the command under test then waits for) until the test ends."""
    conns: list[psycopg.Connection[Any]] = []

    def hold(sql: str) -> None:
        conn = psycopg.connect(frozen_dsn)
        conns.append(conn)
        conn.execute(sql)

    yield hold
    for conn in conns:
        conn.close()


def _waits_on_a_statement(dsn: str, tmp_path: Path, hold: Callable[[str], None]) -> dict[str, str]:
    """The environment of a ``webhook list`` whose read waits for a lock another session
    holds, under a deadline of :data:`STATEMENT_MS`."""
    config = tmp_path / "switchboard.toml"
    config.write_text(f"[server]\ndatabase_timeout_ms = {STATEMENT_MS}\n")
    hold("LOCK TABLE endpoint_webhooks IN ACCESS EXCLUSIVE MODE")
    return make_env(dsn, tmp_path / "data", SWITCHBOARD_CONFIG=str(config))


@pytest.mark.parametrize(
    "command", [("human", "list"), ("webhook", "list"), ("migrate",), ("serve", "--port", "0")]
)
def test_frozen_before_it_connects_a_command_ends_within_the_deadline(
    private_pg: PrivatePostgres, frozen_dsn: str, tmp_path: Path, command: tuple[str, ...]
) -> None:
    env = make_env(frozen_dsn, tmp_path / "data")
    extra = ("--workers", "1") if command[0] == "serve" else ()
    with private_pg.frozen():
        out = _run(env, *command, *extra)
    _assert_one_line(
        out,
        "switchboard: error: the database is unavailable: cannot connect to "
        f"{_where(private_pg, frozen_dsn)} (SWITCHBOARD_DATABASE_URL): no answer within 2 s",
    )


def test_a_partitioned_tcp_database_is_named_without_its_password(tmp_path: Path) -> None:
    """A TCP listener that never answers, as a partitioned server's host: the kernel
    accepts the connection, nothing is ever read from it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        env = make_env(f"postgresql://sb:{PASSWORD}@127.0.0.1:{port}/db", tmp_path / "data")
        out = _run(env, "todos", "list")
    _assert_one_line(
        out,
        "switchboard: error: the database is unavailable: cannot connect to "
        f"127.0.0.1:{port}/db (SWITCHBOARD_DATABASE_URL): no answer within 2 s",
    )


def _frozen_then_ctrl_c(pg: PrivatePostgres, freeze: contextlib.ExitStack) -> Callable[..., None]:
    def act(proc: subprocess.Popen[bytes]) -> None:
        freeze.enter_context(pg.frozen())
        time.sleep(0.3)  # the command's next wait on the server is one that never ends
        os.killpg(proc.pid, signal.SIGINT)  # what the terminal sends on Ctrl-C

    return act


@pytest.mark.parametrize("ctrl_c", [False, True], ids=["to-its-deadline", "then-ctrl-c"])
def test_frozen_while_a_command_waits_on_a_statement(
    private_pg: PrivatePostgres,
    frozen_dsn: str,
    tmp_path: Path,
    holding: Callable[[str], None],
    ctrl_c: bool,
) -> None:
    """It ends within the statement's deadline, naming the database; or, on Ctrl-C, exits
    130 quietly."""
    env = _waits_on_a_statement(frozen_dsn, tmp_path, holding)
    with contextlib.ExitStack() as freeze:
        out = _run(
            env,
            "webhook",
            "list",
            when_waiting=lambda p: _waiting_on(frozen_dsn, p, "wait_event_type = 'Lock'"),
            then=(
                _frozen_then_ctrl_c(private_pg, freeze)
                if ctrl_c
                else lambda p: freeze.enter_context(private_pg.frozen())
            ),
        )
    if ctrl_c:
        assert out.code == 130, out
        assert out.stderr == "", out.stderr  # not the driver's warnings about its cancel
        assert out.took < ENDS_WITHIN_S and not out.left, out
        return
    _assert_one_line(
        out,
        f"switchboard: error: the database is unavailable: {_where(private_pg, frozen_dsn)}"
        f" (SWITCHBOARD_DATABASE_URL): no answer within {STATEMENT_MS // 1000} s",
    )


def test_ctrl_c_on_serve_waiting_at_its_migrations_on_a_frozen_server_exits_130_quietly(
    private_pg: PrivatePostgres,
    frozen_dsn: str,
    tmp_path: Path,
    holding: Callable[[str], None],
) -> None:
    """Another process holds the migration lock: serve waits for it (asking again every
    0.2 s), the server freezes, then Ctrl-C."""
    env = make_env(frozen_dsn, tmp_path / "data")
    holding(f"SELECT pg_advisory_lock({MIGRATION_LOCK})")
    with contextlib.ExitStack() as freeze:
        out = _run(
            env,
            "serve",
            "--port",
            "0",
            "--workers",
            "1",
            when_waiting=lambda p: _waiting_on(
                frozen_dsn, p, "query LIKE 'SELECT pg_try_advisory_lock%'"
            ),
            then=_frozen_then_ctrl_c(private_pg, freeze),
        )
    assert out.code == 130, out
    assert out.took < CTRL_C_WITHIN_S and not out.left, out
    assert "Traceback" not in out.stderr, out.stderr
    assert "psycopg" not in out.stderr, out.stderr  # the driver's cancel warnings
