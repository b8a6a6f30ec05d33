"""The embedded default: serve with no DSN starts a private PostgreSQL and reuses it."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest
from sbtest import CLI, database_refusing, make_env


def _postgres_for(pgdata: Path) -> list[psutil.Process]:
    out = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmd = proc.info.get("cmdline") or []
        if proc.info.get("name") == "postgres" and str(pgdata) in " ".join(cmd):
            out.append(proc)
    return out


@pytest.mark.slow
def test_serve_on_the_embedded_database_and_reuse_it(server_factory: Any, tmp_path: Path) -> None:
    data = tmp_path / "embedded"
    srv = server_factory(None, data_dir=data)
    with urllib.request.urlopen(srv.base_url + "/healthz", timeout=5) as resp:
        assert resp.status == 200
        assert json.loads(resp.read()) == {"status": "ok", "database": "ok"}
    log = srv.log.read_text()
    assert "embedded PostgreSQL" in log and str(data / "pg") in log
    # One line says so; the embedded server's own INFO chatter (initdb's and pg_ctl's whole
    # output) is not in serve's INFO log.
    assert "initdb" not in log and '"logger": "pgserver"' not in log, log[:2000]

    # A CLI command run beside the server uses the same embedded database.
    cli = CLI(make_env(None, data))
    cli.json("human", "add", "carol")
    srv.stop()
    # The last handle is gone: the private server stopped with the service.
    assert _postgres_for(data / "pg") == []

    # Starting again reuses the data: carol is still there, nothing re-initialized.
    srv2 = server_factory(None, data_dir=data)
    proc = cli.run("human", "add", "carol", check=False)
    assert proc.returncode == 1 and "already exists" in proc.stderr
    assert "reusing embedded PostgreSQL" in srv2.log.read_text()
    srv2.stop()
    assert _postgres_for(data / "pg") == []


def test_with_a_dsn_nothing_is_started(server_factory: Any, dsn: str, tmp_path: Path) -> None:
    data = tmp_path / "nodb"
    srv = server_factory(dsn, data_dir=data)
    assert not (data / "pg").exists()
    assert "embedded" not in srv.log.read_text()


@pytest.mark.slow
def test_healthz_answers_503_when_the_database_goes_away(
    server_factory: Any, pg_server: Any, dsn: str
) -> None:
    srv = server_factory(dsn)
    # Terminate the server's connections and forbid new ones: the check must say so.
    with database_refusing(pg_server, dsn):
        try:
            urllib.request.urlopen(srv.base_url + "/healthz", timeout=15)
        except urllib.error.HTTPError as err:
            assert err.code == 503
        else:
            raise AssertionError("healthz should fail without a database")
    # And it recovers once the database is back.
    import time

    for _ in range(50):
        try:
            with urllib.request.urlopen(srv.base_url + "/healthz", timeout=5) as resp:
                if resp.status == 200:
                    break
        except urllib.error.HTTPError:
            time.sleep(0.2)
    else:
        raise AssertionError("healthz did not recover")


def test_a_data_directory_of_another_major_version_is_refused_clearly(tmp_path: Path) -> None:
    """Not the server's own start-up failure: what made the data, and what to do."""
    from switchboard.store.embedded import provider

    data = tmp_path / "old"
    (data / "pg").mkdir(parents=True)
    (data / "pg" / "PG_VERSION").write_text("12\n")
    proc = CLI(make_env(None, data)).run("migrate", check=False)
    assert proc.returncode == 2, proc.stderr
    assert "made by PostgreSQL 12" in proc.stderr and provider().split()[0] in proc.stderr
    assert "SWITCHBOARD_DATABASE_URL" in proc.stderr
    assert _postgres_for(data / "pg") == []


def test_a_start_lock_held_by_a_stopped_process_ends_the_start_at_its_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The provider takes its machine-wide start lock with no deadline: a process stopped
    while holding it (SIGSTOP, as a suspended terminal job) held every command for ever.
    A start now waits at most LOCK_WAIT_S for it, then names the lock file."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from switchboard.errors import StoreUnavailable
    from switchboard.store import embedded

    module, _, _ = embedded._backend()
    path = module.PostgresServer._lock.path
    path = path.decode() if isinstance(path, bytes) else str(path)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fasteners, sys, time\n"
         f"lock = fasteners.InterProcessLock({path!r}); lock.acquire()\n"
         "print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        os.kill(holder.pid, signal.SIGSTOP)
        monkeypatch.setattr(embedded, "LOCK_WAIT_S", 0.5)
        began = time.monotonic()
        with pytest.raises(StoreUnavailable) as refused:
            embedded.EmbeddedPostgres(tmp_path / "data", quiet=True).start()
        assert time.monotonic() - began < 5
        assert f"start lock ({path}) for 0.5 s" in str(refused.value)
        assert not (tmp_path / "data" / "pg" / "PG_VERSION").exists()  # nothing half made
    finally:
        holder.kill()
        holder.wait()
