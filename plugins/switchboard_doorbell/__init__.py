"""First-party sink: ring the doorbell (``NOTIFY todo_ready``) for each new todo."""

from __future__ import annotations

from typing import Any

from switchboard import hookimpl

CHANNEL = "todo_ready"


class Doorbell:
    """``NOTIFY todo_ready, '<endpoint_id>:<queue>'`` once per endpoint and queue."""

    name = "doorbell"

    async def deliver(self, runtime: Any, event: dict[str, Any], todos: list[dict[str, Any]]) -> None:
        rings = dict.fromkeys(f"{t['endpoint_id']}:{t['queue']}" for t in todos)
        for ring in rings:
            await runtime.store.notify(CHANNEL, ring)


@hookimpl
def switchboard_register_sinks(register: Any) -> None:
    register.add(Doorbell())
