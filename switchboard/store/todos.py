"""SQL for the drain verbs: list, claim, claim_next, complete, fail, heartbeat."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from ..errors import Conflict
from .db import Database, Row, is_uuid
from .migrate import read_sync

_COLS = (
    "id, endpoint_id, queue, state, title, payload, event_id, owner, lease_expires_at,"
    " attempts, available_at, result, created_at, updated_at, completed_at, routing_trace,"
    " work_order, claim_id"
)

#: SQL fragment: a todo row is claimable now (a fresh pending one, or an expired lease).
_CLAIMABLE = (
    "((state = 'pending' AND available_at <= now())"
    " OR (state = 'claimed' AND lease_expires_at < now()))"
)

# An expired lease that has used every attempt is dead, not claimable again.
_BURY_EXPIRED = """
    UPDATE todos SET state = 'dead', owner = NULL, lease_expires_at = NULL,
                     completed_at = now(), updated_at = now()
    WHERE endpoint_id = %(endpoint)s AND queue = ANY(%(queues)s) AND state = 'claimed'
      AND lease_expires_at < now() AND attempts >= %(max_attempts)s
"""

_CLAIM_NEXT = f"""
    UPDATE todos t SET state = 'claimed', owner = %(owner)s, attempts = t.attempts + 1,
                       claim_id = gen_random_uuid(),
                       lease_expires_at = now() + make_interval(secs => %(ttl)s),
                       updated_at = now()
    WHERE t.id = (
        SELECT id FROM todos
        WHERE endpoint_id = %(endpoint)s AND queue = ANY(%(queues)s) AND {_CLAIMABLE}
        ORDER BY available_at, created_at, id
        LIMIT 1
        FOR UPDATE SKIP LOCKED
    )
    RETURNING {_COLS}
"""

_CLAIM_ONE = f"""
    UPDATE todos SET state = 'claimed', owner = %(owner)s, attempts = attempts + 1,
                     claim_id = gen_random_uuid(),
                     lease_expires_at = now() + make_interval(secs => %(ttl)s),
                     updated_at = now()
    WHERE id = %(id)s AND endpoint_id = %(endpoint)s AND queue = ANY(%(queues)s)
      AND {_CLAIMABLE} AND attempts < %(max_attempts)s
    RETURNING {_COLS}
"""

#: A todo the caller holds: claimed by its endpoint and, when the caller names its claim
#: (``claim``), by that claim, not by one taken since its lease ran out.
_HELD = (
    "id = %(id)s AND endpoint_id = %(endpoint)s AND queue = ANY(%(queues)s)"
    " AND state = 'claimed' AND owner = %(owner)s"
    " AND (%(claim)s::uuid IS NULL OR claim_id = %(claim)s::uuid)"
)


@dataclass(frozen=True)
class Hold:
    """Who acts on a todo it holds (complete, fail, heartbeat): the endpoint, within its
    scope queues, as ``owner``; and, when the caller names it, the claim (:data:`_HELD`)."""

    endpoint_id: str
    queues: list[str]
    owner: str
    claim: str | None = None

    def params(self, todo_id: str, **more: Any) -> dict[str, Any]:
        """The statement's parameters: :data:`_HELD`'s for ``todo_id``, and ``more``."""
        return {
            "id": todo_id,
            "endpoint": self.endpoint_id,
            "queues": self.queues,
            "owner": self.owner,
            "claim": self.claim,
            **more,
        }


#: What an operator's listing shows of a todo (never its payload or work order).
_BROWSE_COLS = (
    "t.id, t.endpoint_id, e.name AS endpoint_name, t.queue, t.state, t.title, t.event_id,"
    " t.owner, t.attempts, t.available_at, t.lease_expires_at, t.created_at, t.updated_at,"
    " t.completed_at"
)


#: What a scrape reads: open and dead todos by queue and state, in one grouped statement.
#: ``done`` todos are left out: they only grow, and the scrape's cost must not grow with
#: history; bounded by a statement timeout so a slow database cannot hold a scrape.
TODO_COUNTS = (
    "SELECT queue, state, count(*) AS n FROM todos WHERE state <> 'done' GROUP BY queue, state"
)
TODO_COUNTS_TIMEOUT_MS = 2000


def todo_counts_sync(dsn: str, timeout_s: float = 2.0) -> list[Row]:
    """:meth:`TodoQueries.todo_counts` on a connection of its own (see :func:`read_sync`)."""
    return read_sync(dsn, TODO_COUNTS, timeout_s)


class TodoQueries:
    db: Database

    async def todo_counts(self) -> list[Row]:
        """``{queue, state, n}`` for every queue and state but ``done`` (for the metrics)."""
        async with self.db.conn() as conn:
            async with conn.transaction():
                await conn.execute(f"SET LOCAL statement_timeout = {TODO_COUNTS_TIMEOUT_MS}")
                cur = await conn.execute(TODO_COUNTS)
                return await cur.fetchall()

    async def browse_todos(
        self,
        *,
        endpoint_id: str | None = None,
        queue: str | None = None,
        state: str | None = None,
        limit: int,
    ) -> list[Row]:
        """Any endpoint's todos for an operator, newest first, filtered by what is given."""
        where: list[str] = []
        params: dict[str, Any] = {"limit": limit}
        for column, value in (("endpoint_id", endpoint_id), ("queue", queue), ("state", state)):
            if value is not None:
                where.append(f"t.{column} = %({column})s")
                params[column] = value
        return await self.db.fetchall(
            f"SELECT {_BROWSE_COLS} FROM todos t JOIN endpoints e ON e.id = t.endpoint_id"
            + (" WHERE " + " AND ".join(where) if where else "")
            + " ORDER BY t.created_at DESC, t.id DESC LIMIT %(limit)s",
            params,
        )

    async def unreachable_todos(
        self,
        *,
        owner_human: str | None,
        queue: str | None,
        states: list[str],
        limit: int,
        endpoint_id: str | None = None,
    ) -> list[Row]:
        """Todos in a queue their endpoint does not drain (no one can claim them), newest
        first, with the webhook that made them: of ``owner_human``'s webhooks, or of all."""
        where = ["NOT (t.queue = ANY(e.scope_queues))", "t.state = ANY(%(states)s)"]
        params: dict[str, Any] = {"states": states, "limit": limit}
        if owner_human is not None:
            where.append("o.owner_human = %(human)s")
            params["human"] = owner_human
        for column, value in (("queue", queue), ("endpoint_id", endpoint_id)):
            if value is not None:
                where.append(f"t.{column} = %({column})s")
                params[column] = value
        return await self.db.fetchall(
            f"SELECT {_BROWSE_COLS}, ev.webhook_id FROM todos t"
            " JOIN endpoints e ON e.id = t.endpoint_id JOIN events ev ON ev.id = t.event_id"
            " JOIN endpoint_webhooks w ON w.id = ev.webhook_id"
            " JOIN endpoints o ON o.id = w.endpoint_id"
            f" WHERE {' AND '.join(where)} ORDER BY t.created_at DESC, t.id DESC"
            " LIMIT %(limit)s",
            params,
        )

    async def todos_of_event(self, event_id: str) -> list[Row]:
        """The todos one event made, in the order they were written."""
        if not is_uuid(event_id):
            return []
        return await self.db.fetchall(
            f"SELECT {_BROWSE_COLS} FROM todos t JOIN endpoints e ON e.id = t.endpoint_id"
            " WHERE t.event_id = %s ORDER BY t.created_at, t.id",
            (event_id,),
        )

    async def get_todo(self, endpoint_id: str, queues: list[str], todo_id: str) -> Row | None:
        """The endpoint's todo in one of ``queues``, or None (another's reads the same)."""
        if not is_uuid(todo_id):
            return None
        return await self.db.fetchone(
            f"SELECT {_COLS} FROM todos WHERE id = %s AND endpoint_id = %s AND queue = ANY(%s)",
            (todo_id, endpoint_id, queues),
        )

    async def list_todos(
        self, endpoint_id: str, queues: list[str], states: list[str], limit: int
    ) -> list[Row]:
        return await self.db.fetchall(
            f"SELECT {_COLS} FROM todos WHERE endpoint_id = %s AND queue = ANY(%s)"
            " AND state = ANY(%s) ORDER BY available_at, created_at, id LIMIT %s",
            (endpoint_id, queues, states, limit),
        )

    async def claim_next(
        self, endpoint_id: str, queues: list[str], owner: str, ttl: float, max_attempts: int
    ) -> Row | None:
        """Claim the oldest claimable todo; competing claimers skip each other's rows."""
        params = {
            "endpoint": endpoint_id,
            "queues": queues,
            "owner": owner,
            "ttl": ttl,
            "max_attempts": max_attempts,
        }
        async with self.db.tx() as conn:
            await conn.execute(_BURY_EXPIRED, params)
            cur = await conn.execute(_CLAIM_NEXT, params)
            row: Row | None = await cur.fetchone()
            return row

    async def claim_todo(
        self,
        endpoint_id: str,
        queues: list[str],
        todo_id: str,
        owner: str,
        ttl: float,
        max_attempts: int,
    ) -> Row | None:
        """Claim one named todo if it is claimable now (else None)."""
        if not is_uuid(todo_id):
            return None
        return await self.db.fetchone(
            _CLAIM_ONE,
            {
                "id": todo_id,
                "endpoint": endpoint_id,
                "queues": queues,
                "owner": owner,
                "ttl": ttl,
                "max_attempts": max_attempts,
            },
        )

    async def complete_todo(self, hold: Hold, todo_id: str, result: Any) -> Row | None:
        """Mark a todo the caller holds done (None when it does not hold it)."""
        if not is_uuid(todo_id):
            return None
        return await self.db.fetchone(
            "UPDATE todos SET state = 'done', result = %(result)s, owner = NULL,"
            " lease_expires_at = NULL, completed_at = now(), updated_at = now()"
            f" WHERE {_HELD} RETURNING {_COLS}",
            hold.params(todo_id, result=Jsonb(result) if result is not None else None),
        )

    async def fail_todo(
        self,
        hold: Hold,
        todo_id: str,
        result: Any,
        *,
        max_attempts: int,
        backoff_base: float,
        backoff_max: float,
    ) -> Row | None:
        """Back to pending after an exponential backoff, or dead once attempts are spent."""
        if not is_uuid(todo_id):
            return None
        return await self.db.fetchone(
            "UPDATE todos SET result = %(result)s, owner = NULL, lease_expires_at = NULL,"
            " updated_at = now(),"
            " state = CASE WHEN attempts >= %(max)s THEN 'dead' ELSE 'pending' END,"
            " completed_at = CASE WHEN attempts >= %(max)s THEN now() END,"
            " available_at = CASE WHEN attempts >= %(max)s THEN available_at ELSE now()"
            "   + make_interval(secs => least(%(cap)s::float8,"
            "       %(base)s::float8 * power(2, greatest(attempts - 1, 0)))) END"
            f" WHERE {_HELD} RETURNING {_COLS}",
            hold.params(
                todo_id,
                result=Jsonb(result) if result is not None else None,
                max=max_attempts,
                base=backoff_base,
                cap=backoff_max,
            ),
        )

    async def heartbeat_todo(self, hold: Hold, todo_id: str, ttl: float) -> Row | None:
        """Extend the lease of a todo the caller holds (None when it does not hold it)."""
        if not is_uuid(todo_id):
            return None
        return await self.db.fetchone(
            "UPDATE todos SET lease_expires_at = now() + make_interval(secs => %(ttl)s),"
            f" updated_at = now() WHERE {_HELD} RETURNING {_COLS}",
            hold.params(todo_id, ttl=ttl),
        )

    async def retry_todo(
        self, todo_id: str, endpoint_id: str | None = None, queues: list[str] | None = None
    ) -> Row | None:
        """A dead todo pending again at once, with a fresh set of attempts (else None).

        ``endpoint_id`` and ``queues`` confine it to one endpoint's scope (an agent's
        call); an operator's passes neither. The last ``result`` (why it failed) is kept
        until the todo completes or fails again. A dead todo whose delivery has a live todo
        again on that endpoint (the live idempotency key is unique) is a ``Conflict``.
        """
        if not is_uuid(todo_id):
            return None
        where = "id = %(id)s AND state = 'dead'"
        if endpoint_id is not None:
            where += " AND endpoint_id = %(endpoint)s AND queue = ANY(%(queues)s)"
        try:
            return await self.db.fetchone(
                "UPDATE todos SET state = 'pending', attempts = 0, owner = NULL,"
                " lease_expires_at = NULL, completed_at = NULL, available_at = now(),"
                f" updated_at = now() WHERE {where} RETURNING {_COLS}",
                {"id": todo_id, "endpoint": endpoint_id, "queues": queues or []},
            )
        except psycopg.errors.UniqueViolation:
            raise Conflict(
                f"todo {todo_id}: its delivery already has a live todo on this"
                " endpoint; complete or fail that one instead"
            ) from None

    async def get_any_todo(self, todo_id: str) -> Row | None:
        """Any endpoint's todo by id (an operator's lookup), or None."""
        if not is_uuid(todo_id):
            return None
        return await self.db.fetchone(f"SELECT {_COLS} FROM todos WHERE id = %s", (todo_id,))
