"""The store's deadline on a frozen server: a statement abandons its connection on time,
and the pool never lends that connection again."""

from __future__ import annotations

import asyncio
import time

import pytest
from sbfaults import PrivatePostgres

from switchboard.errors import StoreUnavailable
from switchboard.store.db import Database

pytestmark = pytest.mark.slow  # a frozen server: the fault tests' envs run it

TIMEOUT_S = 0.5


async def test_a_statement_on_a_frozen_server_fails_on_time_and_its_connection_is_discarded(
    private_pg: PrivatePostgres, private_dsn: str
) -> None:
    db = Database(private_dsn, min_size=2, max_size=4, acquire_timeout=TIMEOUT_S)
    await db.open()
    try:
        async with db.conn() as conn:
            await conn.execute("SELECT 1")
        abandoned = conn
        with private_pg.frozen():
            started = time.monotonic()
            with pytest.raises(StoreUnavailable) as caught:
                async with db.conn() as conn:
                    abandoned = conn
                    await conn.execute("SELECT 1")
            elapsed = time.monotonic() - started
            # The client-side deadline, not psycopg's ~10 s cancellation on a frozen server.
            assert elapsed < TIMEOUT_S + 0.5, elapsed
            assert "abandoned" in caught.value.detail
            assert await db.ping(timeout=0.3) is False
        assert abandoned.broken or abandoned.closed
        # Thawed: every connection lent works, and none is the abandoned one.
        for _ in range(8):
            async with db.conn() as conn:
                assert conn is not abandoned
                assert (await (await conn.execute("SELECT 1 AS ok")).fetchone()) == {"ok": 1}
        # The server keeps the deadline too: a statement past it is cancelled there.
        with pytest.raises(StoreUnavailable):
            async with db.conn(timeout=5) as conn:
                await conn.execute("SELECT pg_sleep(2)")
        assert (
            db.pool.get_stats().get("returns_bad", 0)
            + db.pool.get_stats().get("connections_lost", 0)
            >= 1
        )
    finally:
        await asyncio.wait_for(db.close(), 10)


async def test_time_a_caller_spends_between_statements_is_not_the_databases(
    private_dsn: str,
) -> None:
    """A rules compile runs inside the webhook's transaction: only the waits on the server
    have the deadline, not the work between them."""
    db = Database(private_dsn, min_size=1, max_size=2, acquire_timeout=TIMEOUT_S)
    await db.open()
    try:
        async with db.tx() as conn:
            await conn.execute("SELECT 1")
            await asyncio.sleep(TIMEOUT_S * 2)
            row = await (await conn.execute("SELECT 2 AS n")).fetchone()
        assert row == {"n": 2}
    finally:
        await asyncio.wait_for(db.close(), 10)
