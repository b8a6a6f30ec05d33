"""Numbered SQL migrations, one transaction each, serialized by an advisory lock."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import psycopg

from ..resources import migrations_dir

#: Arbitrary constant naming Switchboard's migration lock.
MIGRATION_LOCK = 0x5357_4D49

_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


@dataclass(frozen=True)
class Migration:
    key: str
    path: Path


def collect(extra: list[tuple[str, Path]] | None = None) -> list[Migration]:
    """The host's migrations in order, then each plugin's under ``<plugin>/<file>``."""
    out = [Migration(p.name, p) for p in _numbered(migrations_dir())]
    for plugin, directory in extra or []:
        out += [Migration(f"{plugin}/{p.name}", p) for p in _numbered(directory)]
    return out


def _numbered(directory: Path) -> list[Path]:
    files = [p for p in directory.glob("*.sql") if _NAME.match(p.name)]
    return sorted(files, key=lambda p: p.name)


async def apply(dsn: str, migrations: list[Migration]) -> list[str]:
    """Apply what is missing; returns the keys applied by this call."""
    applied: list[str] = []
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        # A session-level lock: two processes starting at once queue here, and the
        # second finds everything already applied.
        await conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
        try:
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " key text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            cur = await conn.execute("SELECT key FROM schema_migrations")
            done = {row[0] for row in await cur.fetchall()}
            for mig in migrations:
                if mig.key in done:
                    continue
                sql = mig.path.read_text(encoding="utf-8")
                async with conn.transaction():
                    await conn.execute(sql.encode())
                    await conn.execute(
                        "INSERT INTO schema_migrations (key) VALUES (%s)", (mig.key,)
                    )
                applied.append(mig.key)
        finally:
            await conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))
    return applied
