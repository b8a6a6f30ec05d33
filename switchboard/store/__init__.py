"""The store layer: all SQL lives here, behind one :class:`Store` facade."""

from __future__ import annotations

from .db import Database, Row
from .events import DeliveryOutcome, EventQueries, OnceClaim
from .history import HistoryQueries
from .identity import IdentityQueries
from .todos import TodoQueries
from .webhooks import WebhookQueries


class Store(IdentityQueries, WebhookQueries, EventQueries, TodoQueries, HistoryQueries):
    """Every query the service layer may run, over one pool."""

    def __init__(self, db: Database) -> None:
        self.db = db


__all__ = ["Database", "DeliveryOutcome", "OnceClaim", "Row", "Store"]
