"""A worker's token resolutions, kept while the database's resolve epoch has not moved."""

from __future__ import annotations

import marshal
import time
from collections import OrderedDict
from dataclasses import dataclass

from .db import Row

#: The longest a resolution is kept, whatever its clock bounds: one lookup a minute for a
#: webhook that delivers at all.
KEEP_MAX_S = 60.0

#: Resolutions a worker keeps (the least recently used go first).
KEEP_MAX = 4096


@dataclass
class _Kept:
    shared: Row  # the immutable columns (ids, text, bytes, booleans, numbers)
    documents: bytes  # the others (documents, lists), marshalled: copied in one C call
    epoch: int
    until: float  # time.monotonic()

    def copy(self) -> Row:
        row = dict(self.shared)
        row.update(marshal.loads(self.documents))
        return row


class ResolutionCache:
    """Resolved webhook rows by token hash, each with the resolve epoch it was read at.

    Nothing here is trusted on its own: a delivery that used a kept row writes with that
    row's epoch, and its write statement stores nothing when the epoch has moved since
    (``store.groupwrite``); the delivery then resolves afresh. What the clock alone
    changes (an endpoint's expiry, the end of a rotation's overlap window) bounds how
    long a row is kept (``ttl_s``, read with it). The highest epoch any statement
    reported retires every row read before it at once.
    """

    def __init__(self) -> None:
        self._rows: OrderedDict[str, _Kept] = OrderedDict()
        self.epoch = -1  # the highest seen

    def get(self, token_hash: str) -> tuple[Row, int] | None:
        """A copy of the row kept for ``token_hash`` (the caller's own: documents too) and
        its epoch, or None."""
        kept = self._rows.get(token_hash)
        if kept is None:
            return None
        if kept.epoch < self.epoch or kept.until <= time.monotonic():
            del self._rows[token_hash]
            return None
        self._rows.move_to_end(token_hash)
        return kept.copy(), kept.epoch

    def put(self, token_hash: str, row: Row, epoch: int, ttl_s: float | None) -> None:
        """Keep a copy of ``row`` (what psycopg and ``json`` read: documents are dicts and
        lists of plain values, which ``marshal`` copies)."""
        self.saw(epoch)
        if epoch < self.epoch:
            return
        keep = KEEP_MAX_S if ttl_s is None else min(float(ttl_s), KEEP_MAX_S)
        if keep <= 0:
            return
        shared = {k: v for k, v in row.items() if not isinstance(v, dict | list)}
        documents = marshal.dumps({k: v for k, v in row.items() if isinstance(v, dict | list)})
        self._rows[token_hash] = _Kept(shared, documents, epoch, time.monotonic() + keep)
        self._rows.move_to_end(token_hash)
        while len(self._rows) > KEEP_MAX:
            self._rows.popitem(last=False)

    def saw(self, epoch: int | None) -> None:
        """A statement read ``epoch``: rows read at an older one are no longer handed out."""
        if epoch is not None and epoch > self.epoch:
            self.epoch = epoch

    def forget(self, token_hash: str) -> None:
        self._rows.pop(token_hash, None)
