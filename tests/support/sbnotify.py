"""Listening for PostgreSQL notifications (the doorbell, a plugin's sink rung at commit)."""

from __future__ import annotations

import select
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg


@contextmanager
def listening(dsn: str, *channels: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection of its own that LISTENs on ``channels``."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for channel in channels:
            conn.execute(f'LISTEN "{channel}"')
        yield conn


def heard(conn: psycopg.Connection[Any], quiet_s: float = 0.5) -> list[tuple[str, str]]:
    """Every (channel, payload) heard on ``conn`` until ``quiet_s`` pass without one."""
    got: list[tuple[str, str]] = []
    while select.select([conn.fileno()], [], [], quiet_s) != ([], [], []):
        got += [(n.channel, n.payload) for n in conn.notifies(timeout=0.05, stop_after=100)]
    return got
