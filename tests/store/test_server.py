"""What Switchboard needs of PostgreSQL behaves the same on every server the suite runs on.

The whole suite runs once per server (the embedded one on each Python, Debian's in the
``pg`` tox env: README, Contributing); these tests pin the three features the design rests
on, through the store's own calls: the schema the migrations build (compared with
``schema.txt``, so every server must build exactly the same one), ``NOTIFY`` (the doorbell)
and ``FOR UPDATE SKIP LOCKED`` (``claim_next``).
"""

from __future__ import annotations

import asyncio
import os
import select
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sbpg import server_version

from switchboard.runtime import Runtime
from switchboard.service import identity
from switchboard.store import migrate

SNAPSHOT = Path(__file__).with_name("schema.txt")
#: Set to rewrite ``schema.txt`` from this server (after a change to the migrations).
REWRITE = "SWITCHBOARD_REWRITE_SCHEMA_SNAPSHOT"

_SCHEMA = """
SELECT format('column %s.%s %s%s null=%s default=%s', c.table_name, c.column_name,
              c.udt_name, coalesce('(' || c.character_maximum_length || ')', ''),
              c.is_nullable, coalesce(c.column_default, '-'))
  FROM information_schema.columns c WHERE c.table_schema = 'public'
UNION ALL
SELECT format('constraint %s %s %s', con.conrelid::regclass, con.conname,
              pg_get_constraintdef(con.oid))
  FROM pg_constraint con JOIN pg_namespace n ON n.oid = con.connamespace
 WHERE n.nspname = 'public'
UNION ALL
SELECT format('index %s', indexdef) FROM pg_indexes WHERE schemaname = 'public'
UNION ALL
SELECT format('trigger %s', pg_get_triggerdef(t.oid))
  FROM pg_trigger t JOIN pg_class r ON r.oid = t.tgrelid
  JOIN pg_namespace n ON n.oid = r.relnamespace
 WHERE n.nspname = 'public' AND NOT t.tgisinternal
UNION ALL
SELECT format('function %s', pg_get_functiondef(p.oid))
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public'
"""


def test_the_server_is_one_the_readme_names(pg_server: Any) -> None:
    num, version = server_version(pg_server)
    assert num >= 150000, f"PostgreSQL {version}: the oldest server tested is 15"


def test_the_migrations_build_the_same_schema_on_every_server(empty_dsn: str) -> None:
    """Host migrations only: a plugin's own tables are its tests' business."""
    asyncio.run(migrate.apply(empty_dsn, migrate.collect()))
    with psycopg.connect(empty_dsn) as conn:
        lines = sorted(str(r[0]).replace("\n", "\n    ").rstrip() for r in conn.execute(_SCHEMA))
    text = "\n".join(lines) + "\n"
    if os.environ.get(REWRITE):
        SNAPSHOT.write_text(text)
    expected = SNAPSHOT.read_text()
    assert text == expected, (
        f"the schema differs from {SNAPSHOT.name}: if the migrations changed, rewrite it "
        f"with {REWRITE}=1 pytest {Path(__file__).name}, and check the diff on every server"
    )


async def test_notify_reaches_a_listener_after_commit_in_order(runtime: Runtime, dsn: str) -> None:
    rings = ["ep-1:inbox", "ep-2:handoff", "ep-1:ünïcode"]
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN todo_ready")
        # Rolled back: never delivered.
        with psycopg.connect(dsn) as conn:
            conn.execute("SELECT pg_notify('todo_ready', 'rolled-back')")
            conn.rollback()
        await runtime.store.notify_many("todo_ready", rings)
        got: list[tuple[str, str]] = []
        while len(got) < len(rings) and select.select([listener.fileno()], [], [], 10)[0]:
            got += [(n.channel, n.payload) for n in listener.notifies(timeout=0.2)]
        assert got == [("todo_ready", r) for r in rings]


async def _queue(rt: Runtime, dsn: str, n: int) -> tuple[dict[str, Any], list[str]]:
    await identity.add_human(rt, "alice")
    made = await identity.vend_endpoint(rt, owner="alice", name="lane", queues=["inbox"])
    caller = await identity.authenticate(rt, made["token"])
    with psycopg.connect(dsn, autocommit=True) as conn:
        ids = [
            str(
                conn.execute(
                    "INSERT INTO todos (endpoint_id, queue, idempotency_key, title, payload,"
                    " routing_trace, available_at) VALUES (%s, 'inbox', %s, %s, '{}',"
                    ' \'{"stage": "default"}\', now() - make_interval(secs => %s)) RETURNING id',
                    (caller["id"], f"k{i}", f"t{i}", n - i),
                ).fetchone()[0]
            )  # type: ignore[index]
            for i in range(n)
        ]
    return caller, ids


async def test_claim_next_skips_rows_another_transaction_holds(runtime: Runtime, dsn: str) -> None:
    caller, (first, second) = await _queue(runtime, dsn, 2)

    async def claim() -> Any:
        row = await asyncio.wait_for(
            runtime.store.claim_next(caller["id"], ["inbox"], "w", 30.0, 3), timeout=10
        )
        return row and row["id"]

    with psycopg.connect(dsn) as holder:  # a transaction: its row lock lasts until rollback
        holder.execute("SELECT 1 FROM todos WHERE id = %s FOR UPDATE", (first,))
        # Not blocked by the held row, and not handed it: the next one instead.
        assert await claim() == second
        # Everything else claimed or held: empty at once, without waiting for the holder.
        assert await claim() is None
        holder.rollback()
    assert await claim() == first


@pytest.mark.slow
async def test_concurrent_claimers_each_get_a_different_row(runtime: Runtime, dsn: str) -> None:
    caller, ids = await _queue(runtime, dsn, 8)
    got = await asyncio.gather(
        *[runtime.store.claim_next(caller["id"], ["inbox"], f"w{i}", 30.0, 3) for i in range(10)]
    )
    claimed = [row["id"] for row in got if row is not None]
    assert sorted(claimed) == sorted(ids)
