"""First-party sink: ring the doorbell (``NOTIFY todo_ready``) for each new todo."""

from __future__ import annotations

import asyncio

from prometheus_client import Counter

from switchboard.plugin import Runtime, SinkEvent, SinkRegistry, SinkTodo, hookimpl

CHANNEL = "todo_ready"

RUNG = Counter(
    "switchboard_doorbells_rung",
    "Doorbells rung: one per endpoint and queue in a "
    "NOTIFY (rings coalesced while one is in flight count once)",
)


class Doorbell:
    """``NOTIFY todo_ready, '<endpoint_id>:<queue>'`` for every endpoint and queue with new work.

    Rings that arrive while a NOTIFY is in flight are coalesced into the next one: a
    doorbell says "there is work", so ringing twice for the same queue adds nothing, and
    under load one statement serves many deliveries.
    """

    name = "doorbell"

    def __init__(self) -> None:
        self._pending: dict[str, None] = {}
        self._flushing: asyncio.Task[None] | None = None

    async def deliver(self, runtime: Runtime, event: SinkEvent, todos: list[SinkTodo]) -> None:
        await self.deliver_many(runtime, [(event, todos)])

    async def deliver_many(
        self, runtime: Runtime, batch: list[tuple[SinkEvent, list[SinkTodo]]]
    ) -> None:
        for _, todos in batch:
            for t in todos:
                self._pending[f"{t['endpoint_id']}:{t['queue']}"] = None
        if self._flushing is None or self._flushing.done():
            self._flushing = asyncio.get_running_loop().create_task(self._flush(runtime))
        await asyncio.shield(self._flushing)

    async def _flush(self, runtime: Runtime) -> None:
        while self._pending:
            rings, self._pending = list(self._pending), {}
            await runtime.store.notify_many(CHANNEL, rings)
            RUNG.inc(len(rings))


@hookimpl
def switchboard_register_sinks(register: SinkRegistry) -> None:
    """The ``doorbell`` sink."""
    register.add(Doorbell())
