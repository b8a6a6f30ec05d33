"""Migrations: ordered, recorded, idempotent, and safe when two processes race."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import psycopg
import pytest
from psycopg.types.json import Jsonb
from sbtest import SWITCHBOARD, make_env

from switchboard.errors import StoreUnavailable
from switchboard.resources import migrations_dir
from switchboard.secrets_box import hash_token
from switchboard.store import migrate

EXPECTED_COLUMNS = {
    "endpoint_webhooks": {
        "routing",
        "ingest_token_hash",
        "signing_secret_enc",
        "rotated_at",
        "trust_mode",
        "target_queue",
    },
    "events": {
        "webhook_id",
        "routing_trace",
        "external_id",
        "headers",
        "body",
        "verified",
        "trust_mode",
        "verify_detail",
        "received_at",
        "size",
        "content_type",
        "raw_headers",
        "disposition",
    },
    "todos": {
        "routing_trace",
        "work_order",
        "idempotency_key",
        "lease_expires_at",
        "attempts",
        "owner",
        "event_id",
        "payload",
        "title",
        "state",
        "queue",
    },
    "routing_once": {"webhook_id", "once_key", "event_id", "created_at"},
    "webhook_refusals": {
        "webhook_id",
        "slot",
        "seq",
        "received_at",
        "reason",
        "detail",
        "delivery_id",
        "source_ip",
        "size",
        "headers",
    },
    "webhook_refusal_counts": {"webhook_id", "total", "last_at"},
    "webhook_routes": {"webhook_id", "target_endpoint_id", "granted_by", "granted_at"},
    "endpoints": {
        "token_hash",
        "scope_queues",
        "webhook_queues",
        "webhook_source_types",
        "webhook_max",
        "state",
        "expires_at",
        "owner_human",
    },
    "friendships": {"from_human", "to_human", "state"},
}


def test_files_are_numbered_and_include_the_routing_history() -> None:
    names = sorted(p.name for p in migrations_dir().glob("*.sql"))
    assert names[0].startswith("0001_")
    assert "0018_event_routing.sql" in names and "0019_handoff_lanes.sql" in names
    assert names.index("0018_event_routing.sql") < names.index("0019_handoff_lanes.sql")


def test_apply_is_recorded_and_idempotent(empty_dsn: str) -> None:
    migs = migrate.collect()
    first = asyncio.run(migrate.apply(empty_dsn, migs))
    assert first == [m.key for m in migs]
    assert asyncio.run(migrate.apply(empty_dsn, migs)) == []
    with psycopg.connect(empty_dsn) as conn:
        keys = [r[0] for r in conn.execute("SELECT key FROM schema_migrations ORDER BY key")]
        assert keys == sorted(m.key for m in migs)
        for table, cols in EXPECTED_COLUMNS.items():
            have = {
                r[0]
                for r in conn.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = %s",
                    (table,),
                )
            }
            assert cols <= have, (table, cols - have)
        idx = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'idx_events_webhook'"
        ).fetchone()
        assert idx and "received_at DESC" in idx[0]


def test_existing_ingest_tokens_are_hashed_in_place(empty_dsn: str) -> None:
    """0020 turns stored clear-text ingest tokens into their SHA-256 and drops the clear text."""
    migs = migrate.collect()
    before = [m for m in migs if m.key < "0020"]
    asyncio.run(migrate.apply(empty_dsn, before))
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO humans (name) VALUES ('old')")
        conn.execute(
            "INSERT INTO endpoints (owner_human, name, token_hash, scope_queues, verbs)"
            " SELECT id, 'ep', 'h', '{inbox}', '{}' FROM humans"
        )
        conn.execute(
            "INSERT INTO endpoint_webhooks (endpoint_id, source_type, target_queue, trust_mode,"
            " ingest_token) SELECT id, 'generic', 'inbox', 'token', 'tok-1' FROM endpoints"
        )
    assert asyncio.run(migrate.apply(empty_dsn, migs))
    with psycopg.connect(empty_dsn) as conn:
        cols = {
            r[0]
            for r in conn.execute(
                "SELECT column_name FROM information_schema.columns"
                " WHERE table_name = 'endpoint_webhooks'"
            )
        }
        assert "ingest_token" not in cols
        row = conn.execute("SELECT ingest_token_hash FROM endpoint_webhooks").fetchone()
        assert row is not None and row[0] == hash_token("tok-1")


def test_routing_config_and_dispositions_are_carried_over(empty_dsn: str) -> None:
    """0022 folds the three routing columns into one and stores each event's disposition."""
    migs = migrate.collect()
    asyncio.run(migrate.apply(empty_dsn, [m for m in migs if m.key < "0022"]))
    rules = [{"id": "r1", "expr": "true", "action": {"drop": True}}]
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO humans (name) VALUES ('old')")
        conn.execute(
            "INSERT INTO endpoints (owner_human, name, token_hash, scope_queues, verbs)"
            " SELECT id, 'ep', 'h', '{inbox}', '{}' FROM humans"
        )
        for n, (routing_rules, default) in enumerate([(rules, {"queue": "inbox"}), ([], None)]):
            conn.execute(
                "INSERT INTO endpoint_webhooks (endpoint_id, source_type, target_queue, trust_mode,"
                " ingest_token_hash, routing_rules, default_action, routing_params)"
                " SELECT id, 'generic', 'inbox', 'token', %s, %s, %s, %s FROM endpoints",
                (
                    f"h{n}",
                    Jsonb(routing_rules),
                    Jsonb(default) if default else None,
                    Jsonb({"n": n}),
                ),
            )
        for n, trace in enumerate(
            [
                {"stage": "rule", "action": {"drop": True}},
                {"stage": "default", "action": {"queue": "inbox"}},
            ]
        ):
            conn.execute(
                "INSERT INTO events (source, external_id, headers, body, verified, trust_mode,"
                " routing_trace, size) VALUES ('generic', %s, '{}', '', false, 'token', %s, 0)",
                (f"e{n}", Jsonb(trace)),
            )
    assert asyncio.run(migrate.apply(empty_dsn, migs))
    with psycopg.connect(empty_dsn) as conn:
        routing = [
            r[0]
            for r in conn.execute(
                "SELECT routing FROM endpoint_webhooks ORDER BY ingest_token_hash"
            )
        ]
        assert routing == [
            {"rules": rules, "default_action": {"queue": "inbox"}, "params": {"n": 0}},
            {"rules": [], "default_action": None, "params": {"n": 1}},
        ]
        dispositions = [
            r[0] for r in conn.execute("SELECT disposition FROM events ORDER BY external_id")
        ]
        assert dispositions == ["dropped", "routed"]
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute("UPDATE events SET disposition = 'lost'")


@pytest.mark.slow
def test_two_concurrent_migrate_commands_both_succeed(empty_dsn: str, tmp_path: Path) -> None:
    env = make_env(empty_dsn, tmp_path / "data")
    procs = [
        subprocess.Popen(
            [*SWITCHBOARD, "migrate"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    import json

    applied = [json.loads(o[0])["applied"] for o in outs]
    # One process applied everything; the other waited on the lock and found nothing to do.
    assert sorted(len(a) for a in applied)[0] == 0
    assert len(max(applied, key=len)) >= 6


def test_a_failing_migration_rolls_back_alone(empty_dsn: str, tmp_path: Path) -> None:
    bad = tmp_path / "plug"
    bad.mkdir()
    (bad / "0001_ok.sql").write_text("CREATE TABLE plug_ok (id int);")
    (bad / "0002_bad.sql").write_text("CREATE TABLE plug_bad (id int); SELECT no_such_fn();")
    migs = migrate.collect([("plug", bad)])
    try:
        asyncio.run(migrate.apply(empty_dsn, migs))
    except psycopg.Error:
        pass
    else:
        raise AssertionError("the broken migration should fail")
    with psycopg.connect(empty_dsn) as conn:
        keys = {r[0] for r in conn.execute("SELECT key FROM schema_migrations")}
        assert "plug/0001_ok.sql" in keys and "plug/0002_bad.sql" not in keys
        tables = {
            r[0]
            for r in conn.execute("SELECT tablename FROM pg_tables WHERE tablename LIKE 'plug_%'")
        }
        assert tables == {"plug_ok"}


def test_a_lock_held_by_an_idle_session_is_waited_for_a_while_then_named(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process that took the migration lock and stopped (SIGSTOP, a hang) sits idle: the
    wait for it ends after LOCK_IDLE_S, naming its backend (it used to be endless)."""
    monkeypatch.setattr(migrate, "LOCK_IDLE_S", 1.0)
    plan = migrate.collect()
    with psycopg.connect(dsn, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (migrate.MIGRATION_LOCK,))
        pid = holder.info.backend_pid
        with pytest.raises(StoreUnavailable) as gave_up:
            asyncio.run(migrate.apply(dsn, plan, timeout=2.0))
        assert f"backend pid {pid}) has held the migration lock for" in str(gave_up.value)
        assert ", idle for 1 s" in str(gave_up.value)


def test_a_lock_held_by_a_session_running_a_statement_is_waited_for(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(migrate, "LOCK_IDLE_S", 1.0)
    plan = migrate.collect()

    async def race() -> list[str]:
        holder = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        await holder.execute("SELECT pg_advisory_lock(%s)", (migrate.MIGRATION_LOCK,))
        # "migrating": busy for 2.5 s (longer than LOCK_IDLE_S), then lets go
        busy = asyncio.ensure_future(
            holder.execute(
                "SELECT pg_sleep(2.5), pg_advisory_unlock(%s)", (migrate.MIGRATION_LOCK,)
            )
        )
        await asyncio.sleep(0.3)
        try:
            return await migrate.apply(dsn, plan, timeout=2.0)
        finally:
            await busy
            await holder.close()

    assert asyncio.run(race()) == []  # waited, then found everything applied
