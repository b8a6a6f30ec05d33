"""First-party sink: ring the doorbell (``NOTIFY todo_ready``) for each new todo."""

from __future__ import annotations

from prometheus_client import Counter

from switchboard.plugin import CommitNotify, SinkRegistry, hookimpl

CHANNEL = "todo_ready"

RUNG = Counter(
    "switchboard_doorbells_rung",
    "Doorbells rung: one per endpoint and queue a committed transaction gave new todos",
)


class Doorbell:
    """``NOTIFY todo_ready, '<endpoint_id>:<queue>'`` for every endpoint and queue with new work.

    PostgreSQL sends it from the transaction that creates the todos (``at_commit``): a
    listener hears it once they are committed, never for a rollback, and the delivery pays
    no round trip for it. A transaction rings each endpoint and queue once, however many
    of its todos went there: a doorbell says "there is work".
    """

    name = "doorbell"
    at_commit = CommitNotify(CHANNEL, rung=RUNG.inc)


@hookimpl
def switchboard_register_sinks(register: SinkRegistry) -> None:
    """The ``doorbell`` sink."""
    register.add(Doorbell())
