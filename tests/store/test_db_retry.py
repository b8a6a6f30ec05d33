"""A plain read that finds its pooled connection dead is asked again on a fresh one; a
write never is (it may have been applied before the connection died)."""

from __future__ import annotations

import psycopg
import pytest

from switchboard.errors import StoreUnavailable
from switchboard.store.db import Database, _rereadable


async def _killed_under_it(db: Database, dsn: str) -> None:
    """Use the pool's one connection, then end its session from outside: lent again at
    once (within the idle gap that skips the check), it fails on its next statement."""
    row = await db.fetchone("SELECT pg_backend_pid() AS pid")
    assert row is not None
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (row["pid"],))


async def test_a_read_on_a_dead_connection_is_asked_again(dsn: str) -> None:
    db = Database(dsn, min_size=1, max_size=1, acquire_timeout=2.0)
    await db.open()
    try:
        await _killed_under_it(db, dsn)
        assert await db.fetchall("SELECT 1 AS one") == [{"one": 1}]
        await _killed_under_it(db, dsn)
        assert await db.fetchone("SELECT 2 AS two") == {"two": 2}
    finally:
        await db.close()


async def test_a_write_on_a_dead_connection_is_not_asked_again(dsn: str) -> None:
    db = Database(dsn, min_size=1, max_size=1, acquire_timeout=2.0)
    await db.open()
    try:
        async with db.conn() as conn:
            await conn.execute("CREATE TABLE t (n int)")
        await _killed_under_it(db, dsn)
        with pytest.raises(StoreUnavailable):
            await db.fetchone("INSERT INTO t VALUES (1) RETURNING n")
        # the next one works, on a fresh connection, and the write was never repeated
        assert await db.fetchall("SELECT n FROM t") == []
    finally:
        await db.close()


@pytest.mark.parametrize(
    ("sql", "again"),
    [
        ("SELECT 1", True),
        ("  select * from todos WHERE id = %s", True),
        ("SELECT id FROM todos FOR UPDATE SKIP LOCKED", False),
        ("SELECT pg_notify('c', 'p')", False),
        ("INSERT INTO t VALUES (1) RETURNING n", False),
        ("WITH gone AS (DELETE FROM t RETURNING *) SELECT * FROM gone", False),
        ("UPDATE t SET n = 2 RETURNING n", False),
    ],
)
def test_only_plain_reads_are_asked_again(sql: str, again: bool) -> None:
    assert _rereadable(sql) is again
