"""SQL for refused deliveries: a ring of the last N per webhook, and a count beyond it.

Refusals are written off the response path: :class:`RefusalWriter` takes them into a
bounded queue that one task per event loop drains in batches (one connection, one
transaction per batch). A full queue never blocks nor grows: what does not fit is only
counted, and the count is written with the next batch, so a flood costs at most
``QUEUE_MAX`` refusals of memory and the table at most ``keep`` rows per webhook.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, deque
from dataclasses import dataclass, field
from datetime import UTC, datetime

from psycopg.types.json import Jsonb

from .. import metrics
from .db import Database, Row, is_uuid

log = logging.getLogger("switchboard.store")

#: How many refusals a webhook keeps by default (``[ingest] refusals_kept``).
DEFAULT_REFUSALS_KEPT = 100
#: Refusals waiting to be written, per event loop; beyond this they are only counted.
QUEUE_MAX = 1000
#: At most this many refusals go into one transaction.
BATCH_MAX = 200

_COUNT = """
    INSERT INTO webhook_refusal_counts AS c (webhook_id, total, last_at)
    VALUES (%(w)s, %(n)s, %(at)s)
    ON CONFLICT (webhook_id) DO UPDATE
    SET total = c.total + EXCLUDED.total, last_at = greatest(c.last_at, EXCLUDED.last_at)
    RETURNING total
"""

# The slot is the refusal's sequence number modulo ``keep``: the N newest overwrite the
# oldest in place, so the table never holds more than N rows of a webhook (slots past a
# lowered ``keep`` are trimmed on the next write).
_RING = """
    INSERT INTO webhook_refusals AS r (webhook_id, slot, seq, received_at, reason, detail,
                                       delivery_id, source_ip, size, headers)
    VALUES (%(w)s, (%(seq)s - 1) %% %(keep)s, %(seq)s, %(at)s, %(reason)s, %(detail)s,
            %(delivery_id)s, %(source_ip)s, %(size)s, %(headers)s)
    ON CONFLICT (webhook_id, slot) DO UPDATE
    SET seq = EXCLUDED.seq, received_at = EXCLUDED.received_at, reason = EXCLUDED.reason,
        detail = EXCLUDED.detail, delivery_id = EXCLUDED.delivery_id,
        source_ip = EXCLUDED.source_ip, size = EXCLUDED.size, headers = EXCLUDED.headers
"""

_COLS = "seq, received_at, reason, detail, delivery_id, source_ip, size, headers"

# The count and the newest rows together (a count is written in the transaction of its
# rows, before them: a webhook with rows always has a count row).
_LIST = f"""
    SELECT c.total AS count_total, c.last_at AS count_last_at, r.*
    FROM webhook_refusal_counts c
    LEFT JOIN LATERAL (
        SELECT {_COLS} FROM webhook_refusals
        WHERE webhook_id = c.webhook_id ORDER BY seq DESC LIMIT %(limit)s
    ) r ON true
    WHERE c.webhook_id = %(w)s
    ORDER BY r.seq DESC
"""


@dataclass(frozen=True)
class Refusal:
    """One refused delivery as recorded: never its body; ``headers`` already sanitized."""

    webhook_id: str
    received_at: datetime
    reason: str
    detail: str | None
    delivery_id: str | None
    source_ip: str | None
    size: int
    headers: dict[str, str]


@dataclass
class _LoopState:
    loop: asyncio.AbstractEventLoop
    #: per webhook, the newest refusals waiting (never more than it keeps)
    queues: dict[str, deque[Refusal]] = field(default_factory=dict)
    queued: int = 0
    #: refusals pushed out of a full queue, per webhook: counted, not kept
    missed: Counter[str] = field(default_factory=Counter)
    drainer: asyncio.Task[None] | None = None
    idle: asyncio.Event = field(default_factory=asyncio.Event)

    def take(self, most: int) -> list[Refusal]:
        batch: list[Refusal] = []
        for webhook_id in list(self.queues):
            waiting = self.queues[webhook_id]
            while waiting and len(batch) < most:
                batch.append(waiting.popleft())
            if not waiting:
                del self.queues[webhook_id]
            if len(batch) >= most:
                break
        self.queued -= len(batch)
        return batch


class RefusalWriter:
    """Records refusals in the background; :meth:`add` never blocks, raises or waits.

    A webhook never has more waiting than it keeps (an older one waiting is pushed out
    and only counted: the ring would overwrite it anyway), so a flood on one webhook
    cannot crowd out another's record.
    """

    def __init__(self, db: Database, keep: int) -> None:
        self.db = db
        self.keep = keep
        self._state: _LoopState | None = None

    def _here(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        if self._state is None or self._state.loop is not loop:
            self._state = _LoopState(loop)
            self._state.idle.set()
        return self._state

    def add(self, refusal: Refusal) -> None:
        """Queue ``refusal`` (only its count when there is no room); called on the hot path."""
        state = self._here()
        webhook_id = refusal.webhook_id
        waiting = state.queues.get(webhook_id)
        if self.keep <= 0:
            state.missed[webhook_id] += 1
        elif waiting is not None and len(waiting) >= self.keep:
            waiting.popleft()  # the oldest waiting goes: the newest are the ones kept
            waiting.append(refusal)
            state.missed[webhook_id] += 1
        elif state.queued >= QUEUE_MAX:
            state.missed[webhook_id] += 1
        else:
            state.queues.setdefault(webhook_id, deque()).append(refusal)
            state.queued += 1
        if state.drainer is None:
            state.idle.clear()
            state.drainer = state.loop.create_task(self._drain(state))

    async def drain(self) -> None:
        """Wait until everything queued in this loop is written (tests, shutdown)."""
        await self._here().idle.wait()

    async def _drain(self, state: _LoopState) -> None:
        try:
            while state.queues or state.missed:
                # Counts first: what was pushed out is older than what waits.
                missed, state.missed = state.missed, Counter()
                batch = state.take(BATCH_MAX)
                try:
                    await self._write(batch, missed)
                except Exception as exc:  # a refusal is answered even when it is not recorded
                    metrics.REFUSALS_UNRECORDED.inc(len(batch) + sum(missed.values()))
                    log.warning("could not record %d refused deliveries: %s", len(batch), exc)
        finally:
            state.drainer = None
            state.idle.set()

    async def _write(self, batch: list[Refusal], missed: Counter[str]) -> None:
        async with self.db.tx() as conn:
            for webhook_id, n in sorted(missed.items()):
                if is_uuid(webhook_id):
                    await conn.execute(_COUNT, {"w": webhook_id, "n": n, "at": datetime.now(UTC)})
            for refusal in batch:
                if not is_uuid(refusal.webhook_id):
                    continue
                cur = await conn.execute(
                    _COUNT, {"w": refusal.webhook_id, "n": 1, "at": refusal.received_at}
                )
                row = await cur.fetchone()
                if row is None or self.keep <= 0:
                    continue
                await conn.execute(
                    _RING,
                    {
                        "w": refusal.webhook_id,
                        "seq": row["total"],
                        "keep": self.keep,
                        "at": refusal.received_at,
                        "reason": refusal.reason,
                        "detail": refusal.detail,
                        "delivery_id": refusal.delivery_id,
                        "source_ip": refusal.source_ip,
                        "size": refusal.size,
                        "headers": Jsonb(refusal.headers),
                    },
                )
            touched = sorted({r.webhook_id for r in batch if is_uuid(r.webhook_id)})
            if touched:
                await conn.execute(
                    "DELETE FROM webhook_refusals WHERE webhook_id = ANY(%s::uuid[])"
                    " AND slot >= %s",
                    (touched, max(self.keep, 0)),
                )


class RefusalQueries:
    """Reading a webhook's recorded refusals back."""

    db: Database

    async def list_refusals(self, webhook_id: str, limit: int) -> tuple[list[Row], Row | None]:
        """The newest ``limit`` refusals of the webhook, and its count row (None: never).

        One statement, so one snapshot: read apart, a batch committing between the two
        reads gave a count that the rows did not show yet.
        """
        found = await self.db.fetchall(_LIST, {"w": webhook_id, "limit": limit})
        if not found:
            return [], None
        count = {"total": found[0]["count_total"], "last_at": found[0]["count_last_at"]}
        cols = _COLS.split(", ")
        return [{c: r[c] for c in cols} for r in found if r["seq"] is not None], count

    async def find_refusal(self, webhook_id: str, delivery_id: str) -> Row | None:
        """The newest recorded refusal of the webhook with ``delivery_id``, if still kept."""
        return await self.db.fetchone(
            f"SELECT {_COLS} FROM webhook_refusals WHERE webhook_id = %s AND delivery_id = %s"
            " ORDER BY seq DESC LIMIT 1",
            (webhook_id, delivery_id),
        )
