"""The PostgreSQL server a test session runs against.

By default the embedded one (``switchboard.store.embedded``, the same provider ``serve``
uses), started in the session's temporary directory and stopped at the end. With
``SWITCHBOARD_TEST_DATABASE_URL`` set, an external server instead: an operator's
PostgreSQL reached through that DSN, whose role may ``CREATE DATABASE`` (a superuser is not
needed). Each test database is created there and dropped after, as on the embedded one.
Both are used through the same two calls pgserver's handle has: ``get_uri(database)`` and
``cleanup()``.
"""

from __future__ import annotations

import os
import re
import time
import urllib.parse
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

#: The admin DSN of an external server for the test session (unset: the embedded one).
EXTERNAL_URL = "SWITCHBOARD_TEST_DATABASE_URL"
#: Optional: the major version the session's server must be (CI checks each axis with it).
EXPECT_MAJOR = "SWITCHBOARD_TEST_EXPECT_POSTGRES"


def with_database(dsn: str, database: str) -> str:
    """``dsn`` naming ``database`` instead (a URL stays a URL, key=value stays key=value)."""
    if re.match(r"postgres(ql)?://", dsn):
        parts = urllib.parse.urlsplit(dsn)
        return urllib.parse.urlunsplit(parts._replace(path="/" + urllib.parse.quote(database)))
    return make_conninfo(dsn, dbname=database)


class ExternalServer:
    """An external PostgreSQL given by an admin DSN, shaped like pgserver's handle."""

    kind = "external"

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.admin_db = conninfo_to_dict(dsn).get("dbname") or "postgres"

    def get_uri(self, database: str | None = None) -> str:
        return with_database(self.dsn, database or self.admin_db)

    def where(self) -> str:
        """Host, port and role, never the password."""
        info = conninfo_to_dict(self.dsn)
        host = info.get("host") or "the default socket"
        port = info.get("port") or "5432"
        return f"{host}:{port} as {info.get('user') or 'the login user'}"

    def cleanup(self) -> None:
        """Nothing to stop: the server is not the session's."""


class EmbeddedServer:
    """The embedded server in ``pgdata``, stopped by ``cleanup``."""

    kind = "embedded"

    def __init__(self, pgdata: Path) -> None:
        from switchboard.store import embedded

        self.provider = embedded.provider()
        self._server = embedded.open_server(pgdata, cleanup_mode="stop")

    def get_uri(self, database: str | None = None) -> str:
        return str(self._server.get_uri(database))

    def where(self) -> str:
        return f"embedded, {self.provider}"

    def cleanup(self) -> None:
        self._server.cleanup()


def session_server(tmp: Path) -> Any:
    """The session's server: the external one if ``SWITCHBOARD_TEST_DATABASE_URL`` names
    one, else a new embedded one under ``tmp``."""
    url = os.environ.get(EXTERNAL_URL, "").strip()
    return ExternalServer(url) if url else EmbeddedServer(tmp / "pg")


def server_version(server: Any) -> tuple[int, str]:
    """``(server_version_num, server_version)`` of the session's server."""
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        row = conn.execute(
            "SELECT current_setting('server_version_num')::int, current_setting('server_version')"
        ).fetchone()
    assert row is not None
    return int(row[0]), str(row[1])


def drop_database(server_uri: str, name: str) -> None:
    """``DROP DATABASE name WITH (FORCE)``, waiting out an autovacuum worker in it.

    FORCE terminates the other sessions in the database, but a role that is neither a
    superuser nor in ``pg_signal_backend`` may not terminate an autovacuum worker (it runs
    as no role): PostgreSQL refuses with InsufficientPrivilege. The worker is gone within
    moments, so try again for a while.
    """
    for attempt in range(50):
        try:
            with psycopg.connect(server_uri, autocommit=True) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            return
        except (psycopg.errors.InsufficientPrivilege, psycopg.errors.ObjectInUse):
            if attempt == 49:
                raise
            time.sleep(0.2)
