"""Sinks rung at commit: their NOTIFYs go in the statement that creates the todos."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from .. import metrics
from ..contract.sinks import CommitNotify
from .db import Row

log = logging.getLogger("switchboard.store")

# After a ``td`` CTE (the todos a statement inserted, RETURNING endpoint_id and queue): each
# channel of ``%(ring)s`` rung once for each endpoint and queue with a new todo. PostgreSQL
# sends the notifications when the transaction commits, and none when it rolls back, so the
# doorbell costs no round trip of its own. The statement's last SELECT names ``rung``: a
# CTE that is not read is not run.
RUNG = """rung AS (
        SELECT count(pg_notify(c, r.endpoint_id::text || ':' || r.queue)) AS n
        FROM unnest(%(ring)s::text[]) AS c, (SELECT DISTINCT endpoint_id, queue FROM td) AS r
    )"""


class Rings:
    """The ``at_commit`` declarations of the registered sinks, for the store's statements."""

    def __init__(self, notifies: Sequence[tuple[str, str, CommitNotify]] = ()) -> None:
        """``notifies``: (sink, plugin, its ``at_commit``) for each sink rung at commit."""
        #: The ``%(ring)s`` parameter of a statement with :data:`RUNG`.
        self.channels = [n.channel for _, _, n in notifies]
        # each sink's series of switchboard_sink_rings_total, and its callback
        self._sinks = tuple(
            (f"sink {sink!r} (plugin {plugin!r})", metrics.SINK_RINGS.labels(sink), n.rung)
            for sink, plugin, n in notifies
        )

    def committed(self, created: Iterable[Row]) -> None:
        """After a commit: the notifications it sent (one per endpoint and queue of the
        todos it ``created``; PostgreSQL folds a transaction's identical ones) counted for
        each sink, and handed to its ``rung`` callback. A callback that raises is logged,
        never the write's failure."""
        if not self._sinks:
            return
        n = len({(t["endpoint_id"], t["queue"]) for t in created})
        if not n:
            return
        for who, series, rung in self._sinks:
            series.inc(n)
            if rung is None:
                continue
            try:
                rung(n)
            except Exception:
                log.exception("%s: its at_commit rung callback failed", who)
