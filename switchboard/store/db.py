"""The connection pool and the helpers every query module shares."""

from __future__ import annotations

import asyncio
import logging
import uuid
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Sequence, cast

import psycopg
from psycopg.rows import RowMaker, dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from ..errors import StoreUnavailable

Row = dict[str, Any]

log = logging.getLogger("switchboard.store")


def _row_factory(cursor: psycopg.AsyncCursor[Any]) -> RowMaker[Row]:
    make = dict_row(cursor)

    def convert(values: Sequence[Any]) -> Row:
        row = make(values)
        for key, value in row.items():
            if isinstance(value, uuid.UUID):
                row[key] = str(value)
        return row

    return convert


def is_uuid(value: object) -> bool:
    """True when ``value`` is a UUID string (ids from callers are checked before SQL)."""
    if not isinstance(value, str):
        return False
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


class Database:
    """Owns the async pool; query mixins use :meth:`conn` and :meth:`tx`."""

    def __init__(
        self, dsn: str, *, min_size: int = 2, max_size: int = 20, acquire_timeout: float = 2.0
    ) -> None:
        self.dsn = dsn
        # A request waits at most ``acquire_timeout`` for a connection: with the database
        # gone, a producer gets its 503 quickly (and retries) instead of holding a socket
        # for the pool's reconnect loop. New connections get the same bound to connect.
        self.pool = AsyncConnectionPool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            open=False,
            kwargs={
                "row_factory": _row_factory,
                "autocommit": True,
                "connect_timeout": max(1, round(acquire_timeout)),
            },
            timeout=acquire_timeout,
        )

    async def open(self) -> None:
        try:
            await self.pool.open(wait=True, timeout=15.0)
        except Exception as exc:  # psycopg_pool raises PoolTimeout with the cause logged
            raise StoreUnavailable("cannot connect to the database", detail=str(exc)) from exc

    async def close(self) -> None:
        await self.pool.close()

    @asynccontextmanager
    async def conn(
        self, timeout: float | None = None
    ) -> AsyncIterator[psycopg.AsyncConnection[Row]]:
        """A pooled autocommit connection; connection failures become StoreUnavailable."""
        try:
            async with self.pool.connection(timeout=timeout) as conn:
                yield cast("psycopg.AsyncConnection[Row]", conn)
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            raise StoreUnavailable(detail=str(exc)) from exc
        except PoolTimeout as exc:
            raise StoreUnavailable(detail=f"no connection within the timeout: {exc}") from exc

    @asynccontextmanager
    async def tx(self) -> AsyncIterator[psycopg.AsyncConnection[Row]]:
        """A pooled connection inside one transaction (rolled back on any error)."""
        async with self.conn() as conn:
            async with conn.transaction():
                yield conn

    async def fetchone(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> Row | None:
        async with self.conn() as conn:
            cur = await conn.execute(sql, params)
            return await cur.fetchone()

    async def fetchall(
        self, sql: str, params: Sequence[Any] | dict[str, Any] = (), *, binary: bool = False
    ) -> list[Row]:
        """Every row; ``binary`` asks for binary results (bytea as is, not hex text)."""
        async with self.conn() as conn:
            cur = await conn.execute(sql, params, binary=binary)
            return await cur.fetchall()

    async def ping(self, timeout: float) -> bool:
        """True when the database answers within ``timeout`` seconds (False, never raises)."""

        async def probe() -> bool:
            async with self.conn(timeout=timeout) as conn:
                cur = await conn.execute("SELECT 1 AS ok")
                row = await cur.fetchone()
                return bool(row and row["ok"] == 1)

        try:
            return await asyncio.wait_for(probe(), timeout)
        except (StoreUnavailable, TimeoutError, psycopg.Error) as exc:
            log.warning("health check: database unavailable: %s", getattr(exc, "detail", exc))
            return False
