"""Where a database URL points and what a command says when it cannot be used: in the
user's terms (the setting that named it), never its password."""

from __future__ import annotations

import re

import psycopg
from psycopg.conninfo import conninfo_to_dict

from ..errors import ConfigError, StoreUnavailable

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
#: The schemes libpq reads as a connection URI.
_PG_SCHEMES = ("postgresql", "postgres")
#: What libpq quotes in its reason (a parameter, a token, the whole URI).
_QUOTED = re.compile(r'"([^"]*)"')
#: What libpq quotes of its own syntax (``missing "=" after ...``), never the value's.
_OWN = frozenset({"=", "]"})


def check_dsn(dsn: str, source: str) -> None:
    """Refuse (``ConfigError``, exit 2) a ``database_url`` libpq cannot read, naming
    ``source`` (where it was set). The value is never quoted: it may hold a password."""
    try:
        parts = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        scheme = _SCHEME.match(dsn.strip())
        if scheme and scheme[1].lower() not in _PG_SCHEMES:
            why = f"its scheme is {scheme[1]}://, not postgresql://"
        elif scheme or "=" in dsn:
            # libpq's own reason ('invalid URI query parameter: "sslmod"'), with what it
            # quotes of the value kept only where that cannot be the password
            why = _libpq_reason(str(exc), dsn, uri=bool(scheme))
        else:
            why = "it is neither a postgresql:// URL nor key=value settings"
        raise ConfigError(
            f"{source} is not a PostgreSQL URL: {why} (expected "
            "postgresql://USER:PASSWORD@HOST:PORT/DATABASE or host=... dbname=...)"
        ) from None
    port = str(parts.get("port") or "")
    if port and not all(p.strip().isdigit() for p in port.split(",")):
        raise ConfigError(f"{source} is not a PostgreSQL URL: its port {port!r} is not a number")
    if port and not all(1 <= int(p) <= 65535 for p in port.split(",")):
        raise ConfigError(
            f"{source} is not a PostgreSQL URL: its port {port} is not from 1 to 65535"
        )


def _libpq_reason(text: str, dsn: str, *, uri: bool) -> str:
    """libpq's first line of ``text`` about ``dsn``, each quoted part shown only where it
    cannot be (part of) a password: in a URI anything outside its ``user:password@`` and
    ``password=`` value; in key=value settings only a parameter's name."""
    if uri:
        rest = dsn.split("://", 1)[1]
        hidden = [rest.rpartition("@")[0], *re.findall(r"[?&]password=([^&]*)", rest)]
        hidden = [h for h in hidden if h]

        def shown(quoted: str) -> bool:
            return not any(quoted in h or h in quoted for h in hidden)
    else:

        def shown(quoted: str) -> bool:
            # an unknown parameter's name is written "name=": never a password's text
            return bool(re.search(rf"(^|\s){re.escape(quoted)}\s*=", dsn)) and (
                quoted.lower() != "password"
            )

    first = (text.strip().splitlines() or ["cannot be read"])[0]
    reason = _QUOTED.sub(lambda m: m[0] if m[1] in _OWN or shown(m[1]) else '"…"', first)
    return f"libpq cannot read it: {reason}"


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
