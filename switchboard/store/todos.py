"""SQL for the drain verbs: list, claim, claim_next, complete, fail, heartbeat."""

from __future__ import annotations

from .db import Database


class TodoQueries:
    db: Database
