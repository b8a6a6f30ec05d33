"""The store layer: all SQL lives here, behind one :class:`Store` facade."""

from __future__ import annotations

from .db import Database, Row
from .identity import IdentityQueries


class Store(IdentityQueries):
    """Every query the service layer may run, over one pool."""

    def __init__(self, db: Database) -> None:
        self.db = db


__all__ = ["Database", "Row", "Store"]
