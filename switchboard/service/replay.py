"""Stream a webhook's stored deliveries through a verdict stage: pages in, verdicts out, in order.

Each event comes out with its stored trace (``row["routing_trace"]``) and, when a stage is
to be re-run on it, its envelope, so that ``routing.stagereplay`` can replay every stage.

The one evaluation path of the history verbs (``service.history``): each page of stored
events is read by keyset (never the whole window), each event's envelope is rebuilt once
(parsed once, whatever the number of configs) and handed in batches to the stage's
``verdicts``, which evaluates every config in one pass where live routing evaluates (the
rules stage: its sandbox). The next page is read, and the next batch built, while the
stage evaluates, and up to ``parallel`` batches are in the sandbox at once.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import datetime as dt
import json
import re
import time
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidArgument
from ..routing.model import RoutingConfig
from ..routing.replay import stored_envelope
from ..routing.verdicts import RuleVerdict, VerdictStage
from ..runtime import Runtime
from ..store import Row
from ..store.db import is_uuid

#: Events read per page, and sent to the sandbox per batch at most.
PAGE = 256
#: Batches in the sandbox at once (each holds one of the owner's evaluation slots while it
#: runs and gives it back after, so the owner's live deliveries wait at most one batch).
PARALLEL = 2
#: About how long one batch may keep the sandbox (see ``_Pace``), and the first batch's size
#: (before its pace is known).
BATCH_S = 0.5
FIRST_BATCH = 8
#: The window of ``last`` when neither ``last`` nor ``since`` is given.
DEFAULT_LAST = 1000

#: ``progress(done, total, message)``: how far a history call is (total None: unknown).
Progress = Callable[[int, int | None, str | None], Awaitable[None]]

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
#: The furthest back a ``since`` may reach (as far as retention may keep events).
SINCE_MAX_DAYS = 36500


def parse_since(value: str, now: dt.datetime | None = None) -> dt.datetime:
    """``since`` as a point in time: a duration back from now (``90m``, ``24h``, ``7d``, ``2w``)
    or an RFC 3339 timestamp with its offset."""
    now = now or dt.datetime.now(dt.UTC)
    if not isinstance(value, str):
        raise InvalidArgument("since: a duration (30m, 24h, 7d) or an RFC 3339 timestamp")
    earliest = now - dt.timedelta(days=SINCE_MAX_DAYS)
    too_far = InvalidArgument(
        f"since: at most {SINCE_MAX_DAYS} days ({SINCE_MAX_DAYS // 365} years) back (got {value!r})"
    )
    found = _DURATION.match(value)
    if found:
        seconds = float(found[1]) * _UNIT_S[found[2]]
        if seconds > SINCE_MAX_DAYS * 86400:
            raise too_far
        return now - dt.timedelta(seconds=seconds)
    try:
        when = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgument(
            f"since: a duration (30m, 24h, 7d) or an RFC 3339 timestamp (got {value!r})"
        ) from None
    if when.tzinfo is None:
        raise InvalidArgument("since: the timestamp needs its offset (Z or +hh:mm)")
    if when.year <= 1 or when < earliest:  # year 1 with an offset is before any UTC date
        raise too_far
    return when


@dataclass(frozen=True)
class Window:
    """Which stored events a call evaluates: newest first, from ``after`` (exclusive) on.

    ``remaining`` is how many are left of a ``last N`` window (None: a ``since`` window,
    bounded by ``since``).
    """

    remaining: int | None
    since: dt.datetime | None = None
    after: tuple[dt.datetime, str] | None = None

    def cursor(self, row: Row, taken: int) -> str:
        """A cursor that resumes this window after ``row``, ``taken`` events further on."""
        left = None if self.remaining is None else self.remaining - taken
        doc = [
            row["received_at"].isoformat(),
            str(row["id"]),
            left,
            None if self.since is None else self.since.isoformat(),
        ]
        return base64.urlsafe_b64encode(json.dumps(doc).encode()).decode().rstrip("=")

    @classmethod
    def from_cursor(cls, cursor: str, field: str = "cursor") -> Window:
        """The window ``cursor`` carries; a bad one is refused under ``field``, the
        argument's name."""
        refused = InvalidArgument(f"{field}: not a cursor this tool returned")
        try:
            raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
            stamp, event_id, left, since = json.loads(raw)
            when = dt.datetime.fromisoformat(stamp)
            since_at = None if since is None else dt.datetime.fromisoformat(since)
        except (ValueError, TypeError, binascii.Error):
            raise refused from None
        if (
            not is_uuid(event_id)
            or when.tzinfo is None
            or not (left is None or (isinstance(left, int) and left >= 0))
            or (left is None) == (since_at is None)
            or (since_at is not None and (since_at.tzinfo is None or since_at.year <= 1))
        ):
            raise refused
        return cls(left, since_at, (when, event_id))


def window_of(
    last: Any, since: Any, cursor: Any, *, default_last: int, field: str = "cursor"
) -> Window:
    """The window the arguments name: a cursor (which carries its window), ``last`` or ``since``;
    a bad cursor is refused under ``field``, the argument that carried it."""
    if cursor is not None:
        if not isinstance(cursor, str):
            raise InvalidArgument(f"{field}: not a cursor this tool returned")
        return Window.from_cursor(cursor, field)
    if last is not None and since is not None:
        raise InvalidArgument("give at most one of last or since")
    if since is not None:
        return Window(None, parse_since(since))
    n = default_last if last is None else last
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidArgument("last: must be a positive integer")
    return Window(n)


def call_window(last: Any, since: Any, cursor: Any, changes_cursor: Any) -> Window:
    """The window of a history call that also pages its changes: a ``changes_cursor``
    carries its window as a ``cursor`` does (the caller passed no ``cursor``)."""
    if changes_cursor is None:
        return window_of(last, since, cursor, default_last=DEFAULT_LAST)
    return window_of(last, since, changes_cursor, default_last=DEFAULT_LAST, field="changes_cursor")


async def count_window(
    rt: Runtime, webhook_id: str, window: Window, cap: int, only: Only | None = None
) -> int:
    """How many events the window holds, at most ``cap`` (for progress totals)."""
    want = cap if window.remaining is None else min(cap, window.remaining)
    return await rt.store.history_count(
        webhook_id, limit=want, before=window.after, since=window.since, **(only or {})
    )


#: Which of the window's events a call keeps: ``disposition`` and/or ``event_ids``
#: (the keyword arguments of ``history_page``; a re-route's filters).
Only = dict[str, Any]


@dataclass
class Evaluated:
    """One stored event and, per config, every rule's verdict on it (none without a verdict
    stage); its envelope when asked for (``keep_envelopes``)."""

    row: Row
    verdicts: tuple[list[RuleVerdict], ...]
    envelope: dict[str, Any] | None = None


async def evaluated(
    rt: Runtime,
    stage: VerdictStage | None,
    webhook: Row,
    configs: Sequence[RoutingConfig],
    window: Window,
    *,
    limit: int,
    keep_envelopes: bool = False,
    only: Only | None = None,
) -> AsyncGenerator[Evaluated, None]:
    """The window's events (at most ``limit``), newest first, each with its verdicts.

    ``keep_envelopes``: each event keeps its envelope (for the stages history re-runs).
    ``only``: the events of the window that pass these filters (:data:`Only`).

    Close it (``contextlib.aclosing``) to stop early: batches still in the sandbox are
    cancelled, which kills their evaluators.
    """
    want = limit if window.remaining is None else min(limit, window.remaining)
    if want <= 0:
        return
    webhook_id = str(webhook["id"])
    projections = rt.registries.projections

    async def page(after: tuple[dt.datetime, str] | None, size: int) -> list[Row]:
        return await rt.store.history_page(
            webhook_id, limit=size, before=after, since=window.since, **(only or {})
        )

    # A stage that can take its envelopes in its own form (``prepare``: the rules stage's
    # wire encoding) gets each one so as soon as it is built: the envelope (a parsed payload
    # of many small objects) is freed at once instead of living, a batch at a time, through
    # the sandbox's evaluation, long enough for the collector to walk it again and again.
    # ``preparer(configs)``, where offered, gives the form for these configs (the rules
    # stage: only the paths their rules read).
    preparer = getattr(stage, "preparer", None)
    prepare: Callable[[dict[str, Any]], Any] = (
        preparer(configs)
        if preparer is not None
        else getattr(stage, "prepare", None) or (lambda e: e)
    )

    async def judge(rows: list[Row]) -> list[Evaluated]:
        kept: list[dict[str, Any] | None] = [None] * len(rows)
        if keep_envelopes or stage is None:
            kept = [stored_envelope(projections, r, webhook_id) for r in rows]
        if stage is None:
            none: tuple[list[RuleVerdict], ...] = tuple([] for _ in configs)
            return [Evaluated(r, none, e) for r, e in zip(rows, kept, strict=True)]
        found = await stage.verdicts(
            configs,
            [
                prepare(e if e is not None else stored_envelope(projections, r, webhook_id))
                for r, e in zip(rows, kept, strict=True)
            ],
            webhook=webhook,
        )
        return [
            Evaluated(r, v, e if keep_envelopes else None)
            for r, v, e in zip(rows, found, kept, strict=True)
        ]

    read = 0
    asked = min(PAGE, want)
    fetch: asyncio.Task[list[Row]] | None = asyncio.ensure_future(page(window.after, asked))
    rows: deque[Row] = deque()
    inflight: deque[asyncio.Task[list[Evaluated]]] = deque()
    pace = _Pace()
    try:
        while fetch is not None or rows or inflight:
            if len(inflight) < PARALLEL and (rows or fetch is not None):
                if fetch is not None and len(rows) < pace.size:
                    got = await fetch
                    fetch = None
                    read += len(got)
                    if len(got) == asked and read < want:  # more may follow: read it meanwhile
                        last, asked = got[-1], min(PAGE, want - read)
                        fetch = asyncio.ensure_future(
                            page((last["received_at"], str(last["id"])), asked)
                        )
                    rows.extend(got)
                    continue
                batch = [rows.popleft() for _ in range(min(pace.size, len(rows)))]
                # The coroutine is made inside the task: a task cancelled before it starts
                # then leaves no coroutine behind that was never awaited.
                inflight.append(asyncio.ensure_future(pace.timed(judge, batch)))
                continue
            done = await inflight.popleft()
            for item in done:
                yield item
    finally:
        for task in [*inflight, *([fetch] if fetch is not None else [])]:
            task.cancel()
        for task in [*inflight, *([fetch] if fetch is not None else [])]:
            try:
                await task
            except BaseException:  # noqa: BLE001 - cancelled or failed: either way, gone
                pass


class _Pace:
    """How many events go to the stage in one batch: as many as it evaluates in about
    :data:`BATCH_S`, at most :data:`PAGE`. A caller stops at its deadline only between
    batches, and what is still in the sandbox then is thrown away: with slow rules (each
    event a timeout) a page-sized batch would run for many times the deadline."""

    def __init__(self) -> None:
        self.size = FIRST_BATCH

    async def timed(
        self, judge: Callable[[list[Row]], Awaitable[list[Evaluated]]], batch: list[Row]
    ) -> list[Evaluated]:
        began = time.monotonic()
        out = await judge(batch)
        each = (time.monotonic() - began) / len(batch)
        self.size = max(1, min(PAGE, int(BATCH_S / each) if each > 0 else PAGE))
        return out


class Clock:
    """A call's deadline and its progress reports (at most a few per second)."""

    def __init__(self, deadline_s: float, progress: Progress | None, total: int | None) -> None:
        self.ends = time.monotonic() + deadline_s
        self.progress = progress
        self.total = total
        self._said = 0.0

    def expired(self) -> bool:
        return time.monotonic() >= self.ends

    async def tick(self, done: int, *, force: bool = False) -> None:
        if self.progress is None:
            return
        now = time.monotonic()
        if force or now - self._said >= 0.25:
            self._said = now
            total = self.total
            message = f"{done} of {total} events" if total is not None else f"{done} events"
            await self.progress(done, total, message)
