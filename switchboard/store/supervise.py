"""``serve``'s watch over the embedded PostgreSQL: restarted when it dies, with backoff."""

from __future__ import annotations

import logging
import threading
import time

from .embedded import EmbeddedPostgres

log = logging.getLogger("switchboard.store")

#: How often the postmaster is looked at, and the longest wait between restart attempts.
CHECK_S = 1.0
BACKOFF_MAX_S = 30.0


class Supervisor:
    """A daemon thread that restarts ``server`` when its postmaster is gone.

    Only the embedded default is supervised: an external server is someone else's to run,
    and the pools keep retrying it as they always have.
    """

    def __init__(self, server: EmbeddedPostgres, *, check_s: float = CHECK_S) -> None:
        self.server = server
        self.check_s = check_s
        self.restarts = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pg-supervisor", daemon=True)

    def start(self) -> Supervisor:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self.check_s):
            if self.server.stopping:
                return
            try:
                if not self.server.alive():
                    self._revive()
            except Exception:  # the watch itself must never die
                log.exception("could not check the embedded PostgreSQL")

    def _revive(self) -> None:
        down = time.monotonic()
        wait = 0.5
        attempt = 0
        log.warning("embedded PostgreSQL in %s is not running: restarting it", self.server.pgdata)
        while not self._stop.is_set() and not self.server.stopping:
            attempt += 1
            try:
                self.server.restart()
            except Exception as exc:
                log.warning(
                    "embedded PostgreSQL restart attempt %d failed (%s); next in %.1f s",
                    attempt,
                    " ".join(str(exc).split())[:200],
                    wait,
                )
                if self._stop.wait(wait):
                    return
                wait = min(BACKOFF_MAX_S, wait * 2)
                continue
            self.restarts += 1
            log.warning(
                "embedded PostgreSQL restarted after %.1f s (attempt %d)",
                time.monotonic() - down,
                attempt,
            )
            return
