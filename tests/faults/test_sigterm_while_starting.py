"""SIGTERM while ``serve`` is still starting (before Sanic takes the signal: the embedded
PostgreSQL started, the migrations running): serve stops as on Ctrl-C, exit 143, quietly,
and stops the embedded PostgreSQL it started. The signal used to kill it outright, leaving
that server running with no one to stop it.

serve is held at its migrations by a plugin's own migration that waits, so the window is
hit every time.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sbfaults import (
    assert_gone_with_serve,
    exit_after,
    postmaster_of,
    serve_logged,
    serve_tree,
    stop_leftover_postmaster,
)
from sbtest import install_plugin_module, make_env, stop_process_group

pytestmark = pytest.mark.slow

#: serve is gone within this after the signal.
STOP_S = 15
#: The plugin's migration: serve's start waits here, in the main process, far past any stop.
HELD = "SELECT pg_sleep(120) /* switchboard-held-migration */"

PLUGIN = """\
from pathlib import Path

from switchboard.plugin import hookimpl


@hookimpl
def switchboard_migrations(register):
    register.add_directory("held", Path(__file__).with_name("migrations"))
"""


@pytest.fixture
def held_site(tmp_path: Path) -> Path:
    site = install_plugin_module("switchboard-held", "switchboard_held", PLUGIN, tmp_path)
    migrations = site / "switchboard_held" / "migrations"
    migrations.mkdir()
    (migrations / "0001_held.sql").write_text(HELD + ";\n")
    return site


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    data = tmp_path / "data"
    yield data
    stop_leftover_postmaster(data)


def _held(pgdata: Path) -> bool:
    """Whether serve's migration is waiting in the plugin's migration."""
    try:
        with psycopg.connect(host=str(pgdata), dbname="postgres", user="postgres") as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE query LIKE %s"
                " AND pid <> pg_backend_pid()",
                ("%switchboard-held-migration%",),
            ).fetchone()
    except psycopg.OperationalError:  # not started yet
        return False
    return row is not None and int(row[0]) > 0


def test_sigterm_while_serve_migrates_stops_it_and_its_embedded_database(
    held_site: Path, data_dir: Path, tmp_path: Path
) -> None:
    path = os.pathsep.join(p for p in (str(held_site), os.environ.get("PYTHONPATH")) if p)
    env = make_env(None, data_dir, PYTHONPATH=path)
    log = tmp_path / "serve.log"
    proc = serve_logged(env, log, workers=1)
    try:
        deadline = time.monotonic() + 90
        while not _held(data_dir / "pg"):
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)
        postmaster = postmaster_of(data_dir / "pg")
        group = serve_tree(proc.pid)
        # what a service manager sends serve's main process
        code, took = exit_after(proc, lambda: proc.send_signal(signal.SIGTERM), STOP_S + 15)
    finally:
        stop_process_group(proc)
    text = log.read_text()
    assert code == 128 + signal.SIGTERM, (code, text[-3000:])
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text[-3000:]
    assert took < STOP_S, (took, text[-3000:])
    assert "serving on" not in text, text[-3000:]  # stopped in its start, as meant
    assert_gone_with_serve(postmaster, group, text)
