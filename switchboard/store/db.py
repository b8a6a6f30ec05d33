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
from contextvars import ContextVar
from typing import Any, AsyncIterator, Sequence

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import RowMaker, dict_row
from psycopg.types.json import set_json_dumps
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from ..errors import StoreUnavailable
from ..jsontext import dumps_bytes
from .dsn import dsn_where

Row = dict[str, Any]

#: A connection that answered this recently is lent without a check first: a server
#: restart takes longer than this, so no connection lent after one skips its check.
CHECK_AFTER_IDLE_S = 0.1
#: Connections tried (each checked) for one interaction before it gives up.
LEND_TRIES = 3
#: The server ends a transaction left idle this long (its client gone without a word).
IDLE_IN_TRANSACTION_MS = 60_000
#: How long the pool goes on retrying a connection it failed to open, once it is open.
#: psycopg_pool's default (5 min, with a backoff of 1, 2, 4 … s between attempts) left the
#: pool empty for seconds after the database came back: a request then waited out a
#: backoff it had not caused. A short one gives up at once instead, and the next request
#: that finds no connection opens one itself (the pool grows on demand).
RECONNECT_S = 0.2

log = logging.getLogger("switchboard.store")

#: The task that opened a snapshot, and the connection it reads in (see
#: :meth:`Database.snapshot`). A task started inside the block copies the variable: only
#: the task that opened it reads there (another, a batch flusher, may outlive the block).
_SNAPSHOT: ContextVar[tuple[asyncio.Task[Any], psycopg.AsyncConnection[Any]] | None] = ContextVar(
    "switchboard_snapshot", default=None
)


def _snapshot_conn() -> psycopg.AsyncConnection[Any] | None:
    """The current task's snapshot connection, if it opened one."""
    held = _SNAPSHOT.get()
    if held is None or held[0] is not asyncio.current_task():
        return None
    return held[1]


async def _rows(
    conn: psycopg.AsyncConnection[Any],
    sql: str,
    params: Sequence[Any] | dict[str, Any],
    *,
    one: bool,
    binary: bool,
) -> list[Row]:
    """One statement's rows on ``conn`` (the first only, with ``one``)."""
    cur = await conn.execute(sql, params, binary=binary)
    if one:
        row = await cur.fetchone()
        return [] if row is None else [row]
    return await cur.fetchall()


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


class DeadlineConnection(psycopg.AsyncConnection[Row]):
    """A connection on which every wait for the server has a deadline.

    All of psycopg's statements, commits and rollbacks wait in :meth:`wait`: past
    ``statement_s`` (the store's ``database_timeout_ms``), or past ``until`` when an
    interaction was given a total, the connection is abandoned (see :func:`abandon`) and
    the wait fails at once. Time a caller spends between statements (a rules compile
    inside a transaction) is not the database's and is not counted.
    """

    statement_s: float = 2.0
    #: The loop time the current lending must finish by (None: each statement its own).
    until: float | None = None
    abandoned: bool = False
    #: The deadline of the wait in progress, if one is.
    _expiry: asyncio.TimerHandle | None = None

    async def wait(self, gen: Any, *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        seconds = self.statement_s
        if self.until is not None:
            seconds = min(seconds, self.until - loop.time())
        expiry = self._expiry = loop.call_later(max(0.0, seconds), self._expire)
        try:
            return await super().wait(gen, *args, **kwargs)
        finally:
            expiry.cancel()
            self._expiry = None

    async def cancel_safe(self, *, timeout: float = 30.0) -> None:
        """psycopg cancels a statement whose wait was interrupted (Ctrl-C, a cancelled
        task) by a request on a new connection, waited on 5 s: a frozen server's too, so
        Ctrl-C on a command then took 5 s and more. Within the wait's own deadline here,
        after which its connection is abandoned anyway (and nothing is left to cancel)."""
        if self._expiry is not None:
            left = self._expiry.when() - asyncio.get_running_loop().time()
            if self.abandoned or left <= 0:
                return
            timeout = min(timeout, left)
        await super().cancel_safe(timeout=timeout)

    def _expire(self) -> None:
        self.abandoned = True
        abandon(self)


class DeadConnection(StoreUnavailable):
    """A lent connection died under a statement (not a deadline): the server restarted or
    the link broke. A read that failed so may be asked again on a fresh connection."""


def _rereadable(sql: str) -> bool:
    """True for a plain read: asked twice, it changes nothing (no lock, no write)."""
    head = sql.lstrip()[:6].upper()
    return head == "SELECT" and "FOR UPDATE" not in sql.upper() and "PG_" not in sql.upper()


def _abandoned(limit: float, exc: BaseException) -> str:
    return f"no answer within {limit:g} s: connection abandoned ({exc})"


def _connection_kwargs(dsn: str, timeout: float) -> dict[str, Any]:
    """What every pooled connection is opened with: the deadlines the server keeps too.

    ``statement_timeout`` ends on the server a statement its client stopped waiting for,
    and ``idle_in_transaction_session_timeout`` a transaction a client left open (longer:
    a caller may work between a transaction's statements); keepalives and
    ``tcp_user_timeout`` find a dead peer on TCP without waiting for the kernel's
    retransmission timers. An ``options`` the DSN already has is kept.
    """
    ms = max(1, round(timeout * 1000))
    idle_ms = max(ms, IDLE_IN_TRANSACTION_MS)
    own = conninfo_to_dict(dsn).get("options") or ""
    options = f"-c statement_timeout={ms} -c idle_in_transaction_session_timeout={idle_ms}"
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
            connection_class=DeadlineConnection,
            configure=self._configure,
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
            raise StoreUnavailable(
                f"the database is unavailable: cannot connect to {dsn_where(self.dsn)}",
                detail=str(exc),
            ) from exc
        # Only now: the first connections may take the whole start-up to come (a server
        # that is still starting), later ones are asked for when a request needs them.
        self.pool.reconnect_timeout = RECONNECT_S

    async def close(self) -> None:
        await self.pool.close()

    async def _configure(self, conn: DeadlineConnection) -> None:
        conn.statement_s = self.timeout
        # Jsonb parameters (traces, payloads, todos) are written by orjson where it can.
        set_json_dumps(dumps_bytes, context=conn)

    @asynccontextmanager
    async def conn(
        self, timeout: float | None = None
    ) -> AsyncIterator[psycopg.AsyncConnection[Row]]:
        """A pooled autocommit connection; connection failures become StoreUnavailable.

        The wait for a connection, and each statement on it, take at most the pool's
        timeout; with ``timeout`` given, the whole block does (``/healthz``). Past it the
        connection is abandoned (see :func:`abandon`), the statement awaiting it fails,
        and the pool discards it.
        """
        limit = self.timeout if timeout is None else timeout
        loop = asyncio.get_running_loop()
        until = None if timeout is None else loop.time() + timeout
        conn: DeadlineConnection | None = None
        try:
            conn = await self._lend(limit, until)
            ok = False
            try:
                yield conn
                ok = True
            finally:
                conn.until = None
                if ok:
                    self._answered[conn] = time.monotonic()
                else:
                    self._answered.pop(conn, None)
                await self.pool.putconn(conn)
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            if conn is not None and conn.abandoned:
                raise StoreUnavailable(detail=_abandoned(limit, exc)) from exc
            if conn is not None and conn.broken:
                await self._server_lost()
                raise DeadConnection(detail=str(exc)) from exc
            raise StoreUnavailable(detail=str(exc)) from exc
        except PoolTimeout as exc:
            raise StoreUnavailable(detail=f"no connection within the timeout: {exc}") from exc

    async def _lend(self, limit: float, until: float | None) -> DeadlineConnection:
        """A connection from the pool that works: after an idle gap or an error it is
        checked first, and one that fails the check is thrown away with the whole pool
        (the server restarted: every connection opened before is dead), then another is
        tried at once (psycopg_pool's own check would wait a second's backoff first)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit
        for _ in range(LEND_TRIES):
            conn: DeadlineConnection = await self.pool.getconn(
                timeout=max(0.0, deadline - loop.time())
            )
            conn.until = until
            answered = self._answered.get(conn)
            if answered is not None and time.monotonic() - answered < CHECK_AFTER_IDLE_S:
                return conn
            try:
                await conn.execute("")
                return conn
            except psycopg.Error as exc:
                conn.until = None
                await self.pool.putconn(conn)  # broken: the pool discards it
                if conn.abandoned:
                    raise StoreUnavailable(detail=_abandoned(limit, exc)) from exc
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

    @asynccontextmanager
    async def snapshot(self) -> AsyncIterator[None]:
        """Every read the current task makes with :meth:`fetchone` or :meth:`fetchall` inside
        the block sees one snapshot of the database (a REPEATABLE READ, READ ONLY
        transaction on one connection), so an answer put together from several statements
        never mixes two commits. Nested, the outermost holds; a write inside fails."""
        task = asyncio.current_task()
        if _snapshot_conn() is not None or task is None:
            yield
            return
        async with self.conn() as conn:
            async with conn.transaction():
                await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                token = _SNAPSHOT.set((task, conn))
                try:
                    yield
                finally:
                    _SNAPSHOT.reset(token)

    async def fetchone(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> Row | None:
        rows = await self._fetch(sql, params, one=True)
        return rows[0] if rows else None

    async def fetchall(
        self, sql: str, params: Sequence[Any] | dict[str, Any] = (), *, binary: bool = False
    ) -> list[Row]:
        """Every row; ``binary`` asks for binary results (bytea as is, not hex text)."""
        return await self._fetch(sql, params, binary=binary)

    async def _fetch(
        self,
        sql: str,
        params: Sequence[Any] | dict[str, Any],
        *,
        one: bool = False,
        binary: bool = False,
    ) -> list[Row]:
        """One statement's rows. A plain read whose connection died under it is asked once
        more on a fresh connection (see :func:`_rereadable`); a write never is. Inside a
        :meth:`snapshot`, on its connection (and never asked again: a fresh one would read
        another snapshot)."""
        held = _snapshot_conn()
        if held is not None:
            return await _rows(held, sql, params, one=one, binary=binary)
        for last in (not _rereadable(sql), True):
            try:
                async with self.conn() as conn:
                    return await _rows(conn, sql, params, one=one, binary=binary)
            except DeadConnection:
                if last:
                    raise
                log.info("a read lost its connection: asked again on a fresh one")
        raise AssertionError("unreachable")

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
