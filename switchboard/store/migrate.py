"""Numbered SQL migrations, one transaction each, serialized by an advisory lock."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import dict_row

from ..errors import StoreUnavailable
from ..resources import migrations_dir
from .db import DeadlineConnection

log = logging.getLogger("switchboard.store")

#: Arbitrary constant naming Switchboard's migration lock.
MIGRATION_LOCK = 0x5357_4D49
#: How long connecting and each bookkeeping statement (the lock, the list of what is
#: applied) may wait for an answer, unless told (``server.database_timeout_ms``).
#: Every command migrates before it opens the store, so this is where a frozen database
#: (SIGSTOP, a partition: the kernel accepts, nobody answers) is first met.
TIMEOUT_S = 2.0
#: A migration's own SQL may legitimately run long (an index on a big table): it waits
#: this long, then the server is taken for frozen.
MIGRATION_S = 600.0
#: How often a process waiting for another's migrations asks for the lock again. Asked,
#: not queued for (``pg_advisory_lock``): each ask has the deadline above, a queued wait
#: could not have one without cutting short the other process's long migration.
LOCK_POLL_S = 0.2
#: How long the lock's holder may sit idle (its session running no statement: a process
#: stopped or hung between its migrations) before the wait is given up. One that is
#: migrating runs statements, and is waited for up to MIGRATION_S in all.
LOCK_IDLE_S = 30.0
#: The session holding the migration lock, and what it is doing (its state is None where
#: this role may not see another role's sessions: then only MIGRATION_S ends the wait).
_HOLDER_SQL = (
    "SELECT l.pid, a.state FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid"
    " WHERE l.locktype = 'advisory' AND l.granted AND l.classid = 0 AND l.objid = %s"
    " AND l.objsubid = 1"
)

_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


@dataclass(frozen=True)
class Migration:
    key: str
    path: Path


def collect(extra: list[tuple[str, Path]] | None = None) -> list[Migration]:
    """The host's migrations in order, then each plugin's under ``<plugin>/<file>``."""
    out = [Migration(p.name, p) for p in _numbered(migrations_dir())]
    for plugin, directory in extra or []:
        out += [Migration(f"{plugin}/{p.name}", p) for p in _numbered(directory)]
    return out


def _numbered(directory: Path) -> list[Path]:
    files = [p for p in directory.glob("*.sql") if _NAME.match(p.name)]
    return sorted(files, key=lambda p: p.name)


class NoAnswer(psycopg.OperationalError):
    """The server accepted the connection (or the statement) and never answered in time:
    frozen, or partitioned. An OperationalError, as a refused connection is, so callers
    report both the same way (:func:`switchboard.store.dsn.unreachable`)."""


@contextlib.asynccontextmanager
async def _connection(dsn: str, timeout: float) -> AsyncIterator[DeadlineConnection]:
    """A connection of its own: connecting and each statement wait at most ``timeout``
    seconds (whole seconds to connect: libpq's ``connect_timeout``); past that
    :class:`NoAnswer` is raised."""
    seconds = max(1, round(timeout))
    try:
        conn = await DeadlineConnection.connect(
            dsn, autocommit=True, row_factory=dict_row, connect_timeout=seconds
        )
    except psycopg.errors.ConnectionTimeout as exc:
        raise NoAnswer(f"no answer within {seconds} s") from exc
    conn.statement_s = timeout
    try:
        async with conn:
            yield conn
    except psycopg.OperationalError as exc:
        if conn.abandoned:
            raise NoAnswer(f"no answer within {conn.statement_s:g} s") from exc
        raise


async def apply(dsn: str, migrations: list[Migration], *, timeout: float = TIMEOUT_S) -> list[str]:
    """Apply what is missing; returns the keys applied by this call.

    Connecting and each bookkeeping statement wait at most ``timeout`` seconds, each
    migration at most :data:`MIGRATION_S`; past that :class:`NoAnswer` is raised.
    """
    async with _connection(dsn, timeout) as conn:
        return await _apply_locked(conn, migrations)


async def fetch_once(dsn: str, sql: str, *, timeout: float = TIMEOUT_S) -> list[dict[str, Any]]:
    """The rows of one read on a connection of its own, under :func:`apply`'s deadlines."""
    async with _connection(dsn, timeout) as conn:
        return await (await conn.execute(sql.encode())).fetchall()


def read_sync(dsn: str, sql: str, timeout_s: float) -> list[dict[str, Any]]:
    """The rows of one read on a connection of its own, for a thread with no event loop
    (the metrics listener's); :class:`NoAnswer` past the deadline.

    Connecting and the read each wait at most ``timeout_s`` on this side: a frozen server
    never enforces its own ``statement_timeout``, and a blocking psycopg read then waited
    for ever. The server's ``statement_timeout`` stays, to end a slow read nobody waits for.
    """
    ms = max(1, round(timeout_s * 1000))
    own = conninfo_to_dict(dsn).get("options") or ""
    bounded = make_conninfo(dsn, options=f"{own} -c statement_timeout={ms}".strip())
    return asyncio.run(fetch_once(bounded, sql, timeout=timeout_s))


async def _apply_locked(conn: DeadlineConnection, migrations: list[Migration]) -> list[str]:
    applied: list[str] = []
    # A session-level lock: two processes starting at once wait here, and the second
    # finds everything already applied. Closing the connection releases it too.
    await _lock(conn)
    await conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " key text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
    )
    cur = await conn.execute("SELECT key FROM schema_migrations")
    done = {row["key"] for row in await cur.fetchall()}
    bookkeeping_s = conn.statement_s
    for mig in migrations:
        if mig.key in done:
            continue
        sql = mig.path.read_text(encoding="utf-8")
        conn.statement_s = MIGRATION_S
        async with conn.transaction():
            await conn.execute(sql.encode())
            await conn.execute("INSERT INTO schema_migrations (key) VALUES (%s)", (mig.key,))
        conn.statement_s = bookkeeping_s
        applied.append(mig.key)
    await conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))
    return applied


async def _lock(conn: DeadlineConnection) -> None:
    """Take the migration lock, asking again while another process holds it: for as long
    as it migrates (up to :data:`MIGRATION_S`), or :data:`LOCK_IDLE_S` while its session
    runs nothing; then :class:`StoreUnavailable` names the holder."""
    began = time.monotonic()
    idle_since: float | None = None
    while True:
        cur = await conn.execute("SELECT pg_try_advisory_lock(%s) AS locked", (MIGRATION_LOCK,))
        row = await cur.fetchone()
        if row is not None and row["locked"]:
            return
        holder = await (await conn.execute(_HOLDER_SQL, (MIGRATION_LOCK,))).fetchone()
        pid, state = (holder["pid"], holder["state"]) if holder else ("?", None)
        now = time.monotonic()
        if now - began < LOCK_POLL_S:  # the first ask: said once (a CLI shows warnings)
            log.warning(
                "waiting for another process's migrations (PostgreSQL backend pid %s holds"
                " their lock)",
                pid,
            )
        if state in (None, "active"):
            idle_since = None
        elif idle_since is None:
            idle_since = now
        idle_for = now - idle_since if idle_since is not None else 0.0
        if idle_for >= LOCK_IDLE_S or now - began >= MIGRATION_S:
            how = f"idle for {idle_for:.0f} s" if idle_for >= LOCK_IDLE_S else "migrating"
            raise StoreUnavailable(
                f"the database is unavailable: another session (PostgreSQL backend pid {pid})"
                f" has held the migration lock for {now - began:.0f} s, {how} (a process"
                " stopped or hung while migrating?): end it (pg_terminate_backend) or wait"
            )
        await asyncio.sleep(LOCK_POLL_S)
