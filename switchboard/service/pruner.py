"""The retention job of every ``serve``: prunes expired events every ``[retention] interval_s``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from ..errors import SwitchboardError
from ..runtime import Runtime
from . import retention

log = logging.getLogger("switchboard.retention")

#: The first run waits at most this long after a start (a server restarted more often
#: than the interval still prunes).
FIRST_RUN_MAX_S = 60.0
#: How long a stop waits for the batch in flight (each is one short statement under the
#: store's deadline) before it cancels the job.
STOP_GRACE_S = 5.0


class Pruner:
    """Runs :func:`retention.prune` on the configured cutoffs, off the request path.

    Every worker of every server runs one; the prune lock lets one batch at a time go
    (a run that finds it held leaves the work to its holder), and a run's batches pause
    between them, so ingest keeps the database.
    """

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        _days, self.interval_s, _batch = retention.settings(rt)
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="retention")

    async def stop(self) -> None:
        """Stop after the batch in flight (within :data:`STOP_GRACE_S`, else cancelled)."""
        self._stop.set()
        if self._task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._task), STOP_GRACE_S)
        except TimeoutError:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        wait = min(self.interval_s, FIRST_RUN_MAX_S)
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), wait)
            if self._stop.is_set():
                return
            wait = self.interval_s
            try:
                await self.run_once()
            except SwitchboardError as exc:
                # The database away or slow: the next run tries again.
                log.warning("retention: prune run failed: %s", exc)

    async def run_once(self) -> int:
        """One run over the configured cutoffs; logs one line when any is configured."""
        started = time.monotonic()
        cutoffs = await retention.configured_cutoffs(self.rt)
        if not cutoffs:
            return 0
        done = await retention.prune(self.rt, cutoffs, wait=False, stopping=self._stop.is_set)
        deleted = int(done["deleted"])
        log.info(
            "retention: pruned %d expired event(s) over %d webhook scope(s) in %.2f s%s",
            deleted,
            len(cutoffs),
            time.monotonic() - started,
            " (cut short: stopping, or another server is pruning)" if done["cut_short"] else "",
        )
        return deleted
