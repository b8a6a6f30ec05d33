"""Serving ``/metrics``: on the app's address or a listener of its own, summed across workers."""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from prometheus_client import CONTENT_TYPE_LATEST, start_http_server
from prometheus_client.core import Metric
from prometheus_client.registry import Collector
from sanic import Request, Sanic
from sanic.response import HTTPResponse

from . import metrics
from .config import Config, database_timeout_s
from .runtime import Runtime
from .store.migrate import NoAnswer
from .store.pending import pending_counts_sync
from .store.reroute import held_count_sync
from .store.todos import todo_counts_sync

log = logging.getLogger("switchboard.metrics")

_T = TypeVar("_T")

PATH = "/metrics"

#: How long a scrape waits for the todo gauge: past it, the last values read, with their
#: age, so a scrape never waits on the database (README: /metrics within a second).
TODO_COUNTS_WAIT_S = 0.5


def settings(config: Config) -> tuple[bool, str, int]:
    """``(enabled, addr, max_queues)`` of the ``[metrics]`` section."""
    section = config.section("metrics")
    return (
        bool(section.get("enabled", True)),
        str(section.get("addr") or ""),
        int(section.get("max_queues", metrics.DEFAULT_MAX_QUEUES)),
    )


def prepare_multiprocess() -> str:
    """A fresh private directory for the workers' series files, exported before they start.

    prometheus-client reads the variable when it is imported, so only processes started
    after this (the Sanic workers) write files; the sandbox's processes start with an empty
    environment and never do. The directory is removed when this process exits.
    """
    path = tempfile.mkdtemp(prefix="switchboard-metrics-")  # 0700, empty: nothing stale
    os.environ[metrics.MULTIPROC_ENV] = path
    atexit.register(shutil.rmtree, path, True)
    return path


def process_exit() -> None:
    """A worker stops: its live-gauge files go (counters and histograms stay in the sum)."""
    if metrics.multiprocess():
        from prometheus_client import multiprocess

        try:
            multiprocess.mark_process_dead(os.getpid())
        except Exception:  # never let a metrics file fail a shutdown
            log.debug("mark_process_dead failed", exc_info=True)


def add_metrics_route(app: Sanic[Any, Any], rt: Runtime) -> None:
    """``GET /metrics`` on the app, unless metrics are off or served on their own address."""
    enabled, addr, max_queues = settings(rt.config)
    if not enabled or addr:
        return

    counts = _TodoCounts(rt)
    deferred = [s.name for s in rt.stages if getattr(s, "deferred", False) is True]

    @app.get(PATH, name="metrics")
    async def scrape(request: Request) -> HTTPResponse:
        extra: list[Metric] = []
        last = await counts.read()
        if last is not None:
            read_at, rows, pending, held = last
            extra.append(metrics.todo_family(rows, max_queues))
            extra.append(metrics.todo_age_family(time.monotonic() - read_at))
            extra.append(metrics.pending_family(pending, deferred))
            if held is not None:
                extra.append(metrics.held_family(held))
        return HTTPResponse(metrics.exposition(extra), content_type=CONTENT_TYPE_LATEST)


class _TodoCounts:
    """The todo gauge's rows, read by one task at a time that no scrape waits on for long.

    A scrape starts a read (unless one is running) and waits :data:`TODO_COUNTS_WAIT_S`
    for it; past that it serves the last rows read, and the read goes on under the store's
    own deadline and updates them for the next scrape (a slow count is not abandoned, and
    its connection not thrown away, at every scrape).
    """

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.last: tuple[float, list[Any], dict[str, int], int | None] | None = None
        self.reading: asyncio.Task[None] | None = None

    async def read(self) -> tuple[float, list[Any], dict[str, int], int | None] | None:
        if self.reading is None or self.reading.done():
            self.reading = asyncio.get_running_loop().create_task(self._read())
        await asyncio.wait({self.reading}, timeout=TODO_COUNTS_WAIT_S)
        return self.last

    async def _read(self) -> None:
        try:
            rows = await self.rt.store.todo_counts()
        except Exception as exc:  # the other series still answer while the database is away
            log.warning("metrics: todo counts unavailable: %s", getattr(exc, "detail", exc))
            return
        try:
            pending = await self.rt.store.pending_counts()
        except Exception as exc:
            log.warning("metrics: pending counts unavailable: %s", getattr(exc, "detail", exc))
            pending = {}
        held: int | None = None
        try:
            held = await self.rt.store.held_count()
        except Exception as exc:
            log.warning("metrics: held count unavailable: %s", getattr(exc, "detail", exc))
        self.last = (time.monotonic(), rows, pending, held)


class _ListenerCounts:
    """:class:`_TodoCounts` for the separate listener, whose scrapes run on threads.

    One reader thread at a time reads the counts, each on a connection of its own and
    within ``timeout_s`` (``server.database_timeout_ms``); a scrape starts one (unless one
    is running) and waits :data:`TODO_COUNTS_WAIT_S` for it, then serves the last values
    read, so a frozen database never holds a scrape. A count that cannot be read is said
    once, until it is read again: a scrape every few seconds would repeat it as often.
    """

    def __init__(self, dsn: str, timeout_s: float) -> None:
        self.dsn = dsn
        self.timeout_s = timeout_s
        self.last: tuple[float, list[Any], dict[str, int], int | None] | None = None
        self.reading: threading.Thread | None = None
        self.lock = threading.Lock()
        #: The counts that failed on their last read (the reader thread's alone).
        self.failing: set[str] = set()

    def read(self) -> tuple[float, list[Any], dict[str, int], int | None] | None:
        with self.lock:
            if self.reading is None or not self.reading.is_alive():
                self.reading = threading.Thread(
                    target=self._read, name="switchboard-metrics-counts", daemon=True
                )
                self.reading.start()
            reading = self.reading
        reading.join(TODO_COUNTS_WAIT_S)
        return self.last

    def _read(self) -> None:
        rows = self._count("todo counts", todo_counts_sync)
        if rows is None:  # the other series still answer while the database is away
            return
        pending = self._count("pending counts", pending_counts_sync)
        held = self._count("held count", held_count_sync)
        if self.last is not None:  # a count not read keeps its last value, as todos do
            pending = self.last[2] if pending is None else pending
            held = self.last[3] if held is None else held
        self.last = (time.monotonic(), rows, pending or {}, held)

    def _count(self, what: str, read: Callable[[str, float], _T]) -> _T | None:
        try:
            value = read(self.dsn, self.timeout_s)
        except Exception as exc:
            if what in self.failing:
                log.debug("metrics: %s still unavailable: %s", what, exc)
            elif isinstance(exc, NoAnswer):
                self.failing.add(what)
                log.warning(
                    "metrics: %s unavailable: the database gave no answer within %g s"
                    " (server.database_timeout_ms); the gauges keep their last values",
                    what,
                    self.timeout_s,
                )
            else:
                self.failing.add(what)
                log.warning("metrics: %s unavailable: %s", what, exc)
            return None
        if what in self.failing:
            self.failing.discard(what)
            log.info("metrics: %s read again", what)
        return value


class _Listener(Collector):
    """What the separate listener collects: the process series, then the todo gauge (the
    last values read, with their age, as on the app's own route)."""

    def __init__(self, dsn: str, max_queues: int, timeout_s: float) -> None:
        self.counts = _ListenerCounts(dsn, timeout_s)
        self.max_queues = max_queues

    def collect(self) -> Iterator[Metric]:
        yield from metrics.process_collector().collect()
        last = self.counts.read()
        if last is not None:
            read_at, rows, pending, held = last
            yield metrics.todo_family(rows, self.max_queues)
            yield metrics.todo_age_family(time.monotonic() - read_at)
            yield metrics.pending_family(pending)
            if held is not None:
                yield metrics.held_family(held)


def start_listener(config: Config, dsn: str) -> str | None:
    """Serve the metrics on ``[metrics] addr`` from this process (a thread); its URL, or None.

    Started in the process that runs the workers, so one listener sums them all.
    """
    enabled, addr, max_queues = settings(config)
    if not enabled or not addr:
        return None
    host, _, port = addr.rpartition(":")
    timeout_s = database_timeout_s(config)
    start_http_server(int(port), host, registry=_Listener(dsn, max_queues, timeout_s))
    return f"http://{addr}{PATH}"
