"""Deliveries written by group commit (event + todos, once-claims) and events read back."""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from collections.abc import Sequence
from typing import Any

from psycopg import errors
from psycopg.types.json import Jsonb

from ..errors import NotFound, StoreUnavailable
from ..routing.model import DISPOSITION_DROPPED, DISPOSITION_PENDING, DISPOSITION_REPEAT
from .batcher import Batcher
from .db import Database, Row, is_uuid
from .groupwrite import Write, firsts, write_many
from .outcome import ONCE_CLAIM, DeliveryOutcome, OnceClaim, StaleResolution
from .rescache import ResolutionCache
from .rings import RUNG, Rings

log = logging.getLogger("switchboard.store")

#: Tries of one batch's transaction that deadlocks with another worker's.
_TX_TRIES = 5


# One statement, one round trip, atomic: the event, then one todo per target (in target
# order) unless the decision is a drop, or its place in the deferred stage's queue when it
# is pending; the sinks' rings for the new todos. A conflicting event (a redelivery)
# inserts nothing.
_RECORD = (
    """
    WITH ev AS (
        INSERT INTO events (id, source, kind, external_id, headers, raw_headers, body,
                            content_type, size, verified, trust_mode, verify_detail,
                            webhook_id, routing_trace, disposition)
        SELECT coalesce(%(id)s::uuid, gen_random_uuid()), %(source)s, %(kind)s, %(external_id)s, %(headers)s, %(raw_headers)s, %(body)s,
               %(content_type)s, %(size)s, %(verified)s, %(trust_mode)s, %(verify_detail)s,
               %(webhook_id)s, %(routing_trace)s, %(disposition)s
        -- resolved from a kept resolution: stored only while it is current (rescache)
        WHERE %(epoch)s::bigint IS NULL OR %(epoch)s::bigint = (SELECT n FROM resolve_epoch)
        ON CONFLICT ON CONSTRAINT events_dedup DO NOTHING
        RETURNING id
    ), td AS (
        INSERT INTO todos (endpoint_id, queue, idempotency_key, title, payload, event_id,
                           routing_trace, work_order)
        SELECT t.endpoint_id, %(queue)s, %(external_id)s, %(title)s, %(payload)s, ev.id,
               %(routing_trace)s, %(work_order)s
        FROM ev, unnest(%(endpoints)s::uuid[]) WITH ORDINALITY AS t(endpoint_id, ord)
        ORDER BY t.ord
        ON CONFLICT (endpoint_id, idempotency_key) WHERE state IN ('pending', 'claimed')
        DO NOTHING
        RETURNING id, endpoint_id, queue
    ), pe AS (
        INSERT INTO pending_events (event_id, stage, endpoint_id)
        SELECT ev.id, %(routing_trace)s::jsonb ->> 'pending',
               (SELECT endpoint_id FROM endpoint_webhooks WHERE id = %(webhook_id)s)
        FROM ev WHERE %(disposition)s::text = 'pending'
    ), """
    + RUNG
    + """
    SELECT (SELECT id FROM ev) AS event_id, (SELECT n FROM resolve_epoch) AS epoch,
           (SELECT n FROM rung) AS rung,
           coalesce((SELECT json_agg(json_build_object(
                        'id', id, 'endpoint_id', endpoint_id, 'queue', queue)
                        ORDER BY array_position(%(endpoints)s::uuid[], endpoint_id))
                     FROM td), '[]'::json) AS todos
"""
)


def _own_failure(exc: Exception) -> Exception:
    """What one delivery's failed write tells its caller.

    A webhook deleted after the delivery resolved its token (and before its write) leaves
    the event nothing to belong to: that is the 404 the producer's retry would get, not a
    fault of ours.
    """
    if (
        isinstance(exc, errors.ForeignKeyViolation)
        and exc.diag.constraint_name == "events_webhook_id_fkey"
    ):
        return NotFound("unknown webhook")
    return exc


class EventQueries:
    db: Database
    #: This worker's kept resolutions (see ``Store.__init__``): a stale write retires them.
    resolutions: ResolutionCache
    #: The per-Store group commit of deliveries (see ``Store.__init__``).
    writes: Batcher[Write, DeliveryOutcome]
    #: The sinks rung in the statements that create todos (see ``Store.__init__``).
    rings: Rings

    async def record_delivery(
        self,
        event: dict[str, Any],
        todo: dict[str, Any],
        endpoints: list[str],
        once: OnceClaim | None = None,
        *,
        epoch: int | None = None,
    ) -> DeliveryOutcome:
        """Write the event and one todo per endpoint atomically; redeliveries collapse.

        ``todo`` holds the fields every todo of this delivery shares (queue, title,
        payload, work_order); the idempotency key and trace are the event's. A redelivery
        (same source and external id) writes nothing: it reports the first delivery's
        todos, and stays dropped (or a repeat) if the first delivery was.
        ``event["disposition"]`` is stored as given; ``dropped`` writes no todos, nor does
        ``pending``, which queues the event for its deferred stage (``pending_events``).

        ``once`` claims its key in the same transaction as the event: when another event
        holds it, the event is stored as a ``repeat`` (with ``once.repeat_trace``) and no
        todo is made. The claim's event id is no foreign key: retention never releases it.

        ``epoch``: the delivery was resolved from a kept resolution read at this resolve
        epoch (``resolve_webhook_kept``). When the epoch has moved since, nothing is stored
        and :class:`StaleResolution` is raised: resolve and route the delivery afresh.

        Concurrent calls are written together (group commit, see :meth:`_flush_writes`);
        this returns once the transaction holding this delivery has committed.
        """
        drop = event["disposition"] == DISPOSITION_DROPPED
        pending = event["disposition"] == DISPOSITION_PENDING
        params = dict(event)
        params.update(
            id=None,
            headers=Jsonb(event["headers"]),
            routing_trace=Jsonb(event["routing_trace"]),
            queue=todo.get("queue"),
            title=todo.get("title", ""),
            payload=Jsonb(todo.get("payload") or {}),
            work_order=Jsonb(todo["work_order"]) if todo.get("work_order") else None,
            endpoints=[] if drop or pending else list(endpoints),
            epoch=epoch,
            ring=self.rings.channels,  # the single-row statement's (a batch passes its own)
        )
        outcome = await self.writes.submit(Write(params, list(endpoints), drop, once))
        if outcome.stale_epoch is not None:
            self.resolutions.saw(outcome.stale_epoch)
            raise StaleResolution(f"resolved at epoch {epoch}, now {outcome.stale_epoch}")
        return outcome

    async def _flush_writes(self, writes: Sequence[Write]) -> list[DeliveryOutcome | BaseException]:
        """The batch in one transaction; when it fails on some item's data, the items again
        in halves (each half its own transaction) until only the bad one fails.

        A lost database fails the whole batch with StoreUnavailable: nothing of it was
        committed, so the producers' retries are safe.
        """
        try:
            return list(await self._write_tx(writes))
        except StoreUnavailable:
            raise
        except Exception as exc:
            if len(writes) == 1:
                return [_own_failure(exc)]
            log.warning(
                "a batch of %d deliveries failed (%s): writing it in parts",
                len(writes),
                type(exc).__name__,
            )
            return await self._isolate(writes)

    async def _isolate(self, writes: Sequence[Write]) -> list[DeliveryOutcome | BaseException]:
        half = len(writes) // 2
        answers: list[DeliveryOutcome | BaseException] = []
        for part in (writes[:half], writes[half:]):
            if answers and isinstance(answers[-1], StoreUnavailable):
                answers += [answers[-1]] * len(part)  # the database went: no more tries
                continue
            try:
                answers += await self._write_tx(part)
            except StoreUnavailable as exc:
                answers += [exc] * len(part)
            except Exception as exc:
                answers += [_own_failure(exc)] if len(part) == 1 else await self._isolate(part)
        return answers

    async def _write_tx(self, writes: Sequence[Write]) -> list[DeliveryOutcome]:
        """One transaction for ``writes``, tried again on a deadlock or serialization failure
        (another worker's batch locked the same keys).

        Without ``once`` claims the batch is one statement, which is its own transaction
        (no BEGIN and COMMIT round trips); a lone delivery takes the single-row statement,
        whose plan PostgreSQL keeps (the batch statement's JSON rows are planned at every
        execution, a cost only a batch pays back), so an idle server writes as fast as
        before group commit.
        """
        plain = [i for i, w in enumerate(writes) if not w.claims]
        claims = sorted((i for i, w in enumerate(writes) if w.claims), key=lambda i: writes[i].key)
        async with self.db.conn() as conn:
            for attempt in range(_TX_TRIES):
                try:
                    if not claims:
                        # Autocommit: the statement has committed when it returns.
                        done = await self._write_plain(conn, writes)
                        self.rings.committed(t for o in done for t in o.todos if t["created"])
                        return done
                    answers: dict[int, DeliveryOutcome] = {}
                    async with conn.transaction():
                        if plain:
                            done = await self._write_plain(conn, [writes[i] for i in plain])
                            answers.update(zip(plain, done, strict=True))
                        for i in claims:
                            answers[i] = await self._record_once(conn, writes[i])
                    # Only now, after COMMIT: each producer's 202 stands on committed rows.
                    self.rings.committed(
                        t for o in answers.values() for t in o.todos if t["created"]
                    )
                    return [answers[i] for i in range(len(writes))]
                except (errors.DeadlockDetected, errors.SerializationFailure):
                    if attempt == _TX_TRIES - 1:
                        raise
                    await asyncio.sleep(random.uniform(0, 0.005 * 2**attempt))
        raise AssertionError("unreachable")

    async def _write_plain(self, conn: Any, writes: Sequence[Write]) -> list[DeliveryOutcome]:
        """Deliveries without claims: the single-row statement for one, else the batch's."""
        if len(writes) == 1:
            w = writes[0]
            return [await self._record(conn, w.params, w.endpoints, drop=w.drop)]
        return await write_many(conn, writes, self.rings.channels)

    async def _record_once(self, conn: Any, write: Write) -> DeliveryOutcome:
        """A delivery with a ``once`` claim, by its own statements in the batch's transaction."""
        once, params, endpoints = write.once, dict(write.params), write.endpoints
        assert once is not None
        source, external_id = write.key
        if params["epoch"] is not None:
            # Checked first: a claim is never taken for a delivery that stores nothing.
            cur = await conn.execute("SELECT n FROM resolve_epoch")
            now = await cur.fetchone()
            assert now is not None
            if now["n"] != params["epoch"]:
                return DeliveryOutcome("", False, False, stale_epoch=now["n"])
            params["epoch"] = None
        cur = await conn.execute(
            "SELECT 1 AS hit FROM events WHERE source = %s AND external_id = %s",
            (source, external_id),
        )
        if await cur.fetchone() is not None:
            # The same event again: it reports what it did the first time, never claims.
            return await self._redelivery(conn, source, external_id)
        event_id = str(uuid.uuid4())
        cur = await conn.execute(ONCE_CLAIM, once.params(event_id))
        holder = await cur.fetchone()
        assert holder is not None
        params["id"] = event_id
        if str(holder["event_id"]) != event_id:
            params.update(
                routing_trace=Jsonb(once.repeat_trace), disposition=DISPOSITION_REPEAT, endpoints=[]
            )
            outcome = await self._record(conn, params, [], drop=True)
            if outcome.new_event:
                return DeliveryOutcome(outcome.event_id, True, False, repeat=True)
            return outcome
        return await self._record(conn, params, endpoints, drop=False)

    async def _record(
        self, conn: Any, params: dict[str, Any], endpoints: list[str], *, drop: bool
    ) -> DeliveryOutcome:
        cur = await conn.execute(_RECORD, params)
        row = await cur.fetchone()
        assert row is not None
        if row["event_id"] is None:
            kept = params["epoch"]
            if kept is not None and kept != row["epoch"]:
                return DeliveryOutcome("", False, False, stale_epoch=row["epoch"])
            return await self._redelivery(conn, params["source"], params["external_id"])
        made = [{**t, "created": True} for t in row["todos"]]
        if drop:
            return DeliveryOutcome(str(row["event_id"]), True, True)
        if params["disposition"] == DISPOSITION_PENDING:
            return DeliveryOutcome(str(row["event_id"]), True, False, pending=True)
        if len(made) < len(endpoints):
            made = await self._collapse(conn, made, endpoints, params["external_id"])
        return DeliveryOutcome(str(row["event_id"]), True, False, made)

    async def _collapse(
        self, conn: Any, made: list[Row], endpoints: list[str], key: str
    ) -> list[Row]:
        """A live todo with this key already existed for some endpoint: report it instead."""
        have = {t["endpoint_id"] for t in made}
        cur = await conn.execute(
            "SELECT id, endpoint_id, queue FROM todos WHERE endpoint_id = ANY(%s::uuid[])"
            " AND idempotency_key = %s AND state IN ('pending', 'claimed')",
            ([e for e in endpoints if e not in have], key),
        )
        live = {r["endpoint_id"]: {**r, "created": False} for r in await cur.fetchall()}
        by_endpoint = {t["endpoint_id"]: t for t in made} | live
        return [by_endpoint[e] for e in endpoints if e in by_endpoint]

    async def _redelivery(self, conn: Any, source: str, external_id: str) -> DeliveryOutcome:
        return (await firsts(conn, [(source, external_id)]))[(source, external_id)]

    async def is_recorded(self, source: str, external_id: str) -> bool:
        """True when a delivery with this dedup key is already stored (a redelivery)."""
        row = await self.db.fetchone(
            "SELECT 1 AS hit FROM events WHERE source = %s AND external_id = %s",
            (source, external_id),
        )
        return row is not None

    async def get_event(self, event_id: str) -> Row | None:
        if not is_uuid(event_id):
            return None
        return await self.db.fetchone("SELECT * FROM events WHERE id = %s", (event_id,))

    async def list_events(
        self,
        webhook_id: str,
        *,
        disposition: str | None,
        limit: int,
        before: tuple[Any, str] | None,
        deleted: bool = False,
    ) -> list[Row]:
        """Newest first; ``before`` is a (received_at, id) keyset cursor. ``deleted``: the
        webhook was deleted, and its events are found by the id they kept."""
        where = ["deleted_webhook_id = %(w)s" if deleted else "webhook_id = %(w)s"]
        params: dict[str, Any] = {"w": webhook_id, "limit": limit}
        if disposition is not None:
            where.append("disposition = %(disposition)s")
            params["disposition"] = disposition
        if before is not None:
            where.append("(received_at, id) < (%(ts)s, %(id)s)")
            params.update(ts=before[0], id=before[1])
        return await self.db.fetchall(
            "SELECT id, webhook_id, deleted_webhook_id, source, kind, external_id, verified,"
            " trust_mode, size, content_type, received_at, routing_trace, disposition,"
            # how long a pending event has waited so far, on the clock that received it
            " CASE WHEN disposition = 'pending' THEN"
            " greatest(0, extract(epoch FROM clock_timestamp() - received_at))::float8"
            " END AS waiting_s"
            " FROM events WHERE "
            + " AND ".join(where)
            + " ORDER BY received_at DESC, id DESC LIMIT %(limit)s",
            params,
        )

    async def notify_many(self, channel: str, payloads: list[str]) -> None:
        """``NOTIFY channel, payload`` for each payload, in one statement."""
        async with self.db.conn() as conn:
            await conn.execute(
                "SELECT pg_notify(%s, p) FROM unnest(%s::text[]) AS p", (channel, payloads)
            )
