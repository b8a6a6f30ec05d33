"""The runtime a plugin is handed, and the stage, sink and registries that are handed it.

Their types name each other (a stage's context and a sink's call carry the runtime; the
runtime carries the registries of stages and sinks), so they share one module rather than
import one another. :class:`Runtime` is what a plugin may use; the host's
:class:`switchboard.runtime.Runtime` implements it (mypy checks it does).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

from .errors import PluginError
from .registry import (
    CommandRegistry,
    LLMProviderRegistry,
    MCPToolRegistry,
    MigrationRegistry,
    NamedRegistry,
    ProjectionRegistry,
    RulePackRegistry,
    SourceRegistry,
    SubjectRegistry,
)
from .routing import Fault, Grant, RoutingConfig, StageResult
from .sinks import CHANNEL_MAX_BYTES, CommitNotify, SinkEvent, SinkTodo

if TYPE_CHECKING:
    import psycopg

#: A database row: column name to value.
Row = dict[str, Any]


# --------------------------------------------------------------------------------------
# The runtime: what a plugin may use of the process's config, registries and store
# --------------------------------------------------------------------------------------


class RuntimeConfig(Protocol):
    """The process's validated configuration (a plugin's own section comes with its hooks)."""

    @property
    def raw(self) -> dict[str, Any]:
        """The whole validated document."""
        ...

    @property
    def base_url(self) -> str:
        """The public URL the server answers on, without a trailing slash."""
        ...

    @property
    def data_dir(self) -> Path:
        """Where this process keeps its files (the embedded database, the secret key)."""
        ...

    def section(self, name: str) -> dict[str, Any]:
        """A top-level section (``server``, ``ingest`` ...), empty when absent."""
        ...


class RuntimeDatabase(Protocol):
    """The connection pool, for a plugin that keeps rows of its own (its own migrations)."""

    def tx(self) -> AbstractAsyncContextManager[psycopg.AsyncConnection[Row]]:
        """A pooled connection inside one transaction (rolled back on any error)."""
        ...

    async def fetchone(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> Row | None:
        """The first row of ``sql``, or None."""
        ...

    async def fetchall(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[Row]:
        """Every row of ``sql``."""
        ...


class RuntimeStore(Protocol):
    """The queries of the host's store a plugin may run, and its pool."""

    @property
    def db(self) -> RuntimeDatabase:
        """The pool, for the plugin's own tables."""
        ...

    async def is_recorded(self, source: str, external_id: str) -> bool:
        """True when a delivery with this dedup key is already stored (a redelivery)."""
        ...

    async def get_endpoint(self, endpoint_id: str) -> Row:
        """The endpoint row; raises ``NotFound`` when there is none."""
        ...

    async def endpoint_grant_queues(self, endpoint_id: str) -> list[str] | None:
        """The queues any webhook this endpoint owns may route to, or None (no endpoint)."""
        ...

    async def pending_counts(self, endpoint_id: str | None = None) -> dict[str, int]:
        """Events waiting for each deferred stage (of one owner endpoint's webhooks)."""
        ...

    async def notify_many(self, channel: str, payloads: list[str]) -> None:
        """``NOTIFY channel, payload`` for each payload, in one statement."""
        ...


class Runtime(Protocol):
    """What a plugin may use of the process's runtime, handed to its hooks, stages and sinks.

    ``store`` raises ``RuntimeError`` until the store is open (a CLI command that runs
    without the database never opens it).
    """

    @property
    def config(self) -> RuntimeConfig:
        """The process's configuration."""
        ...

    @property
    def registries(self) -> Registries:
        """Everything the plugins registered."""
        ...

    @property
    def stages(self) -> Sequence[RoutingStage]:
        """The enabled routing stages, in the order the config gives."""
        ...

    @property
    def state(self) -> dict[str, Any]:
        """Per-process state, each plugin's under its own name."""
        ...

    @property
    def store(self) -> RuntimeStore:
        """The open store."""
        ...


# --------------------------------------------------------------------------------------
# Routing stages and sinks: what is handed the runtime
# --------------------------------------------------------------------------------------


@dataclass
class RoutingContext:
    """What a routing stage sees for one delivery.

    ``config`` is the webhook's routing configuration, ``envelope`` what rules see,
    ``grant`` what the delivery may reach; ``webhook`` is the resolved webhook row (its
    ``id``, ``endpoint_id`` (the owner endpoint), ``source_type``, ``target_queue`` ...),
    read-only by convention. ``faults`` are those the stages before this one reported
    (a stage that decides by taking the default passes them to ``default_decision``).

    ``runtime`` is the process's :class:`Runtime` (its ``store``, ``registries`` and
    ``config``) when the routing runs in the service: a live delivery or a dry run over a
    webhook (``test_webhook_rules``). It is None where nothing is open (``switchboard
    rules test`` offline, unit tests); a stage that needs the database, or another
    plugin's registrations, passes (no decision) then.

    ``external_id`` is a live delivery's dedup key (``<webhook_id>:<delivery id>``; None
    in dry runs). A redelivery is routed like the first delivery and its decision then
    discarded (the store reports the first delivery's todos), so a stage whose decision
    costs something may ask ``runtime.store.is_recorded(envelope["source"], external_id)``
    and pass.

    ``deferred`` is True when the triage worker runs the stages from a deferred one on; a
    deferred stage may then raise :class:`NotYet` to leave the event pending a while.
    """

    webhook: dict[str, Any]
    envelope: dict[str, Any]
    grant: Grant
    config: RoutingConfig = field(default_factory=RoutingConfig)
    faults: list[Fault] = field(default_factory=list)
    runtime: Runtime | None = None
    external_id: str | None = None
    #: True when the triage worker runs a deferred stage (after the producer's 202).
    deferred: bool = False


@runtime_checkable
class RoutingStage(Protocol):
    """What ``switchboard_register_routing_stages`` registers.

    Optional attributes the host reads (``getattr``, so a stage without them is fine):

    - ``trace_schema``: a JSON Schema for the stage's own detail, written under the trace
      key named after the stage (``trace[stage.name]``); checked on every decision.
    - ``timeout_ms``: the stage's own time budget when it needs more than
      ``[routing] stage_timeout_ms`` (the llm stage: its longest model call); counted up
      to 150000 ms.

    ``name`` (and ``trace_name``) must be a trace name (``^[a-z][a-z0-9_]{0,63}$``), not
    ``default``, ``pending``, ``rule`` or a common trace key: checked at start-up.
    - ``trace_name``: what ``trace["stage"]`` says when it decides (default: ``name``; the
      rules stage says ``rule``).
    - ``replay``: how history (diff, explain, lint) replays it over stored deliveries:
      ``"rerun"`` (the default: it is deterministic, and re-run on the stored envelope) or
      ``"stored"`` (it must not be asked again, as the llm stage: its verdict is read from
      each event's stored trace). See :func:`switchboard.contract.routing.replay_of`.
      The receiver routes on a worker's kept resolution of the token, which a write checks:
      when it turns out stale, the delivery is routed again afresh, so a ``rerun`` stage
      may be asked twice for it; a ``stored`` stage never is (the kept resolution is
      confirmed against the database before it is asked).

    A slow stage (the llm stage: a model call) may declare itself **deferred**, so the
    producer never waits for it:

    - ``deferred``: True when a live delivery the stages before it left undecided is
      stored ``pending`` (trace ``{"stage": "pending", "pending": <name>}``, no todo) and
      answered 202 at once; the triage worker of every ``serve`` then claims the event
      (``FOR UPDATE SKIP LOCKED`` with a lease), runs this stage and the ones after it with
      ``ctx.external_id`` None, and writes the decision, its todos and the doorbell's ring.
      Dry runs always run it inline.
    - ``async defers(ctx) -> bool``: whether this delivery has work for it (cheap, no
      costly call); False routes on as if the stage had passed (default: always True).
    - ``max_in_flight``: at most this many of its deferred runs at once per process
      (default 4); the rest stay pending in the database.
    - ``max_attempts``: claims of one event before it gives up (default 3; a claim whose
      lease expires, its worker killed, counts as an attempt).
    - ``gave_up(ctx, attempts) -> StageResult``: the decision when the attempts ran out
      (default: the default with a ``stage_error`` fault naming the stage).

    A stage that raises, answers anything but a :class:`StageResult`, writes a trace that
    fails its schema or goes past its budget costs no delivery: the delivery takes the
    default with a ``stage_error`` / ``stage_timeout`` fault naming the stage.
    """

    name: str

    async def route(self, ctx: RoutingContext) -> StageResult:
        """Decide ``ctx`` or pass (decision None); never raise for tenant faults."""
        ...


@runtime_checkable
class Sink(Protocol):
    """What ``switchboard_register_sinks`` registers."""

    name: str

    async def deliver(self, runtime: Runtime, event: SinkEvent, todos: list[SinkTodo]) -> None:
        """Act on a committed delivery; ``todos`` are only the newly created ones.

        Called off the response path, after commit, never for a redelivery or a drop. An
        exception is logged with the plugin's name and never fails the delivery; the
        service waits for in-flight calls when it stops. A sink may also have
        ``async deliver_many(runtime, batch)``: then it is called once with the
        ``(event, todos)`` pairs of every event that committed in one turn of the event
        loop, and not through this method.
        """
        ...


@runtime_checkable
class CommitSink(Protocol):
    """A sink PostgreSQL rings itself, in the transaction that creates the todos.

    ``at_commit`` says the channel: see :class:`CommitNotify`. The transaction's NOTIFY is
    all such a sink does; it is never called after the commit (it needs no ``deliver``).
    """

    name: str
    at_commit: CommitNotify


# --------------------------------------------------------------------------------------
# The registries of those, and all of them together
# --------------------------------------------------------------------------------------


class StageRegistry(NamedRegistry[RoutingStage]):
    kind = "routing stage"


class SinkRegistry(NamedRegistry[Sink | CommitSink]):
    """Sinks called after commit, and sinks rung in the transaction (``at_commit``)."""

    kind = "sink"

    def __init__(self) -> None:
        super().__init__()
        self._calls: tuple[Sink, ...] = ()  # asked on every delivery
        self._notifies: tuple[tuple[str, str, CommitNotify], ...] = ()

    def add(self, item: Sink | CommitSink) -> Sink | CommitSink:
        notify = getattr(item, "at_commit", None)
        if notify is not None:
            _check_notify(self.current_plugin, getattr(item, "name", None), notify)
        elif not callable(getattr(item, "deliver", None)):
            raise PluginError(
                f"plugin {self.current_plugin!r}: sink {getattr(item, 'name', None)!r} has "
                "neither `async deliver(runtime, event, todos)` nor `at_commit`"
            )
        super().add(item)
        if notify is not None:
            self._notifies += ((item.name, self.current_plugin, notify),)
        else:
            self._calls += (cast(Sink, item),)
        return item

    def called(self) -> tuple[Sink, ...]:
        """The sinks called after commit (with ``deliver`` or ``deliver_many``)."""
        return self._calls

    def notifies(self) -> tuple[tuple[str, str, CommitNotify], ...]:
        """What the sinks rung at commit declared, in registration order: (the sink's name,
        its plugin's, its ``at_commit``)."""
        return self._notifies


def _check_notify(plugin: str, name: object, notify: object) -> None:
    """A sink's ``at_commit`` is a :class:`CommitNotify` PostgreSQL can send."""
    where = f"plugin {plugin!r}: sink {name!r}: at_commit"
    if not isinstance(notify, CommitNotify):
        raise PluginError(f"{where} must be a CommitNotify, not {type(notify).__name__}")
    channel = notify.channel
    if not isinstance(channel, str) or not channel:
        raise PluginError(f"{where}: the channel must be a non-empty string")
    if len(channel.encode()) > CHANNEL_MAX_BYTES or "\x00" in channel:
        raise PluginError(
            f"{where}: the channel {channel[:80]!r} is not a PostgreSQL channel name "
            f"(at most {CHANNEL_MAX_BYTES} bytes, no NUL)"
        )
    if notify.rung is not None and not callable(notify.rung):
        raise PluginError(f"{where}: rung must be callable")


@dataclass
class Registries:
    """Everything the plugins registered, built once per process."""

    sources: SourceRegistry = field(default_factory=SourceRegistry)
    projections: ProjectionRegistry = field(default_factory=ProjectionRegistry)
    subjects: SubjectRegistry = field(default_factory=SubjectRegistry)
    stages: StageRegistry = field(default_factory=StageRegistry)
    sinks: SinkRegistry = field(default_factory=SinkRegistry)
    llm_providers: LLMProviderRegistry = field(default_factory=LLMProviderRegistry)
    rule_packs: RulePackRegistry = field(default_factory=RulePackRegistry)
    mcp_tools: MCPToolRegistry = field(default_factory=MCPToolRegistry)
    commands: CommandRegistry = field(default_factory=CommandRegistry)
    migrations: MigrationRegistry = field(default_factory=MigrationRegistry)
