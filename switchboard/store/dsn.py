"""Where a database URL points and what a command says when it cannot be used: in the
user's terms (the setting that named it), never its password."""

from __future__ import annotations

import re

import psycopg
from psycopg.conninfo import conninfo_to_dict

from ..errors import ConfigError, StoreUnavailable

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


def check_dsn(dsn: str, source: str) -> None:
    """Refuse (``ConfigError``, exit 2) a ``database_url`` libpq cannot read, naming
    ``source`` (where it was set). The value is never quoted: it may hold a password."""
    try:
        parts = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        scheme = _SCHEME.match(dsn.strip())
        why = (
            f"its scheme is {scheme[1]}://, not postgresql://"
            if scheme
            else "it is neither a postgresql:// URL nor key=value settings"
        )
        raise ConfigError(
            f"{source} is not a PostgreSQL URL: {why} (expected "
            "postgresql://USER:PASSWORD@HOST:PORT/DATABASE or host=... dbname=...)"
        ) from None
    port = str(parts.get("port") or "")
    if port and not all(p.strip().isdigit() for p in port.split(",")):
        raise ConfigError(f"{source} is not a PostgreSQL URL: its port {port!r} is not a number")


def dsn_where(dsn: str) -> str:
    """Where ``dsn`` points, without its credentials: ``host:port/database``, or its socket."""
    try:
        parts = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "(unparsable DSN)"
    host = str(parts.get("host") or "localhost")
    port, name = parts.get("port") or 5432, parts.get("dbname") or "?"
    if host.startswith("/"):
        return f"socket in {host} (port {port}), database {name}"
    return f"{host}:{port}/{name}"


def _reason(text: str) -> str:
    """The driver's reason in ``text``: its first line, without libpq's lead ("connection
    to server ... failed: ") or severity (libpq names host and port, never the password)."""
    first = (text.splitlines() or [""])[0]
    reason = re.sub(r"^(FATAL|ERROR):\s*", "", first.rsplit(" failed: ", 1)[-1].strip())
    return reason[:1].lower() + reason[1:]


def unreachable(dsn: str, source: str, exc: BaseException) -> StoreUnavailable:
    """What a connection refused at start says (exit 1): where, from which setting, and the
    driver's reason."""
    reason = _reason(str(exc)) or type(exc).__name__
    return StoreUnavailable(
        f"the database is unavailable: cannot connect to {dsn_where(dsn)} ({source}): {reason}",
        detail=str(exc),
    )


def stopped_answering(dsn: str, source: str, exc: StoreUnavailable) -> StoreUnavailable:
    """What a command says when the database failed it after it connected (exit 1), in
    the terms of :func:`unreachable`: where, from which setting, and why (``no answer
    within 2 s`` for a frozen one). The pool's own error (``exc``) says only "database
    unavailable": its text is what an HTTP client is shown, so it names nothing."""
    reason = _reason(exc.detail.split(": connection abandoned", 1)[0]) or str(exc)
    return StoreUnavailable(
        f"the database is unavailable: {dsn_where(dsn)} ({source}): {reason}", detail=exc.detail
    )
