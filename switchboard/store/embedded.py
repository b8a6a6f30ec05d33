"""The embedded PostgreSQL default: a private server under the data dir, via pgserver."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any


class EmbeddedPostgres:
    """Start (or reuse) the private server in ``<data_dir>/pg`` and hand out its DSN.

    pgserver counts the processes holding a handle: the server stops when the last
    one exits, so ``serve`` keeps it up and a CLI command run beside it reuses it.
    """

    def __init__(self, data_dir: Path, *, quiet: bool = False) -> None:
        self.pgdata = data_dir / "pg"
        self.quiet = quiet
        self._server: Any = None

    def start(self) -> str:
        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        fresh = not (self.pgdata / "PG_VERSION").exists()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pgserver

            self._server = pgserver.get_server(self.pgdata, cleanup_mode="stop")
        if not self.quiet:
            verb = "initialized" if fresh else "reusing"
            print(
                f"switchboard: {verb} embedded PostgreSQL in {self.pgdata} "
                "(set SWITCHBOARD_DATABASE_URL to use another server)",
                file=sys.stderr,
            )
        return str(self._server.get_uri())

    def stop(self) -> None:
        if self._server is not None:
            self._server.cleanup()
            self._server = None
