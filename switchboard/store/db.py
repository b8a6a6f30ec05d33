"""The connection pool and the helpers every query module shares."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
import weakref
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Sequence, cast

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import RowMaker, dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from ..errors import StoreUnavailable

Row = dict[str, Any]

#: A connection that answered this recently is lent without a check first: a server
#: restart takes longer than this, so no connection lent after one skips its check.
CHECK_AFTER_IDLE_S = 0.1
#: Connections tried (each checked) for one interaction before it gives up.
LEND_TRIES = 3

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


def abandon(conn: psycopg.AsyncConnection[Any]) -> None:
    """Break ``conn`` at once: whatever awaits it fails now with OperationalError.

    A shutdown of the socket, not a close of its descriptor (the event loop still watches
    that one) nor a cancellation (which waits on the server: ~10 s on a frozen one). The
    connection is left BAD, so the pool throws it away instead of lending it again.
    """
    try:
        fd = conn.pgconn.socket
    except psycopg.OperationalError:
        return  # already closed
    try:
        with socket.socket(fileno=os.dup(fd)) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class _Scope:
    """One store interaction under a deadline: the connection it holds, if any yet."""

    def __init__(self) -> None:
        self.conn: psycopg.AsyncConnection[Any] | None = None
        self.abandoned = False

    def lend(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.conn = conn
        if self.abandoned:
            abandon(conn)

    def expire(self) -> None:
        self.abandoned = True
        if self.conn is not None:
            abandon(self.conn)


def _connection_kwargs(dsn: str, timeout: float) -> dict[str, Any]:
    """What every pooled connection is opened with: the deadlines the server keeps too.

    ``statement_timeout`` and ``idle_in_transaction_session_timeout`` end, on the server,
    what a client abandoned (a statement it stopped waiting for, a transaction it left
    open); keepalives and ``tcp_user_timeout`` find a dead peer on TCP without waiting for
    the kernel's retransmission timers. An ``options`` the DSN already has is kept.
    """
    ms = max(1, round(timeout * 1000))
    own = conninfo_to_dict(dsn).get("options") or ""
    options = f"-c statement_timeout={ms} -c idle_in_transaction_session_timeout={ms}"
    return {
        "row_factory": _row_factory,
        "autocommit": True,
        "connect_timeout": max(1, round(timeout)),
        "options": f"{own} {options}".strip(),
        "keepalives": 1,
        "keepalives_idle": 5,
        "keepalives_interval": 2,
        "keepalives_count": 3,
        "tcp_user_timeout": ms,
    }


class Database:
    """Owns the async pool; query mixins use :meth:`conn` and :meth:`tx`."""

    def __init__(
        self, dsn: str, *, min_size: int = 2, max_size: int = 20, acquire_timeout: float = 2.0
    ) -> None:
        self.dsn = dsn
        #: The deadline of one store interaction: acquiring a connection and every
        #: statement on it (README: ``server.database_timeout_ms``).
        self.timeout = acquire_timeout
        # With the database gone, a producer gets its 503 quickly (and retries) instead of
        # holding a socket for the pool's reconnect loop. New connections get the same
        # bound to connect.
        self.pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            open=False,
            kwargs=_connection_kwargs(dsn, acquire_timeout),
            timeout=acquire_timeout,
        )
        #: When each connection last finished an interaction without an error.
        self._answered: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], float] = (
            weakref.WeakKeyDictionary()
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
        """A pooled autocommit connection; connection failures become StoreUnavailable.

        Everything in the block, the wait for a connection included, finishes within
        ``timeout`` (default: the pool's): past it the connection is abandoned (see
        :func:`abandon`), the statement awaiting it fails, and the pool discards it.
        """
        limit = self.timeout if timeout is None else timeout
        loop = asyncio.get_running_loop()
        scope = _Scope()
        expiry = loop.call_later(limit, scope.expire)
        conn: psycopg.AsyncConnection[Row] | None = None
        try:
            conn = await self._lend(scope, loop.time() + limit)
            ok = False
            try:
                yield conn
                ok = True
            finally:
                # Done with it before the pool takes it back: a deadline firing now
                # must not break a connection that is idle in the pool.
                expiry.cancel()
                scope.conn = None
                if ok:
                    self._answered[conn] = time.monotonic()
                else:
                    self._answered.pop(conn, None)
                await self.pool.putconn(conn)
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            if scope.abandoned:
                detail = f"no answer within {limit:g} s: connection abandoned ({exc})"
                raise StoreUnavailable(detail=detail) from exc
            if conn is not None and conn.broken:
                await self._server_lost()
            raise StoreUnavailable(detail=str(exc)) from exc
        except PoolTimeout as exc:
            raise StoreUnavailable(detail=f"no connection within the timeout: {exc}") from exc
        finally:
            expiry.cancel()

    async def _lend(self, scope: _Scope, deadline: float) -> psycopg.AsyncConnection[Row]:
        """A connection from the pool that works: after an idle gap or an error it is
        checked first, and one that fails the check is thrown away with the whole pool
        (the server restarted: every connection opened before is dead), then another is
        tried at once (psycopg_pool's own check would wait a second's backoff first)."""
        loop = asyncio.get_running_loop()
        for _ in range(LEND_TRIES):
            conn = cast(
                "psycopg.AsyncConnection[Row]",
                await self.pool.getconn(timeout=max(0.0, deadline - loop.time())),
            )
            scope.lend(conn)
            answered = self._answered.get(conn)
            if answered is not None and time.monotonic() - answered < CHECK_AFTER_IDLE_S:
                return conn
            try:
                await conn.execute("")
                return conn
            except psycopg.Error:
                await self.pool.putconn(conn)  # broken: the pool discards it
                if scope.abandoned:
                    raise
                log.info("a pooled connection failed its check: discarding the pool's")
                await self._server_lost()
        raise StoreUnavailable(detail=f"{LEND_TRIES} pooled connections in a row were dead")

    async def _server_lost(self) -> None:
        """A connection died under us: the others, opened to the same server, go too."""
        self._answered.clear()
        await self.pool.drain()

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
        try:
            async with self.conn(timeout=timeout) as conn:
                cur = await conn.execute("SELECT 1 AS ok")
                row = await cur.fetchone()
                return bool(row and row["ok"] == 1)
        except (StoreUnavailable, psycopg.Error) as exc:
            log.warning("health check: database unavailable: %s", getattr(exc, "detail", exc))
            return False
