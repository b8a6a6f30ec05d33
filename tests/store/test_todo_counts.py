"""The scrape's todo counts read an index of the open todos, not the whole table."""

from __future__ import annotations

import psycopg

from switchboard.store.todos import TODO_COUNTS


def test_the_open_todo_counts_can_be_answered_from_their_index(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        # An empty table is scanned whatever exists; forbid that to see what the planner can use.
        conn.execute("SET enable_seqscan = off")
        plan = "\n".join(str(row[0]) for row in conn.execute("EXPLAIN " + TODO_COUNTS))
    assert "idx_todos_open_by_queue" in plan, plan
