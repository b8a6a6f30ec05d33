"""The plugin contract: every hook Switchboard calls, grouped by the phase that calls it.

Conventions (shared by every hook here):

* Hooks are called with keyword arguments only; an implementation may accept fewer
  arguments than the spec lists, so specs can grow without breaking plugins.
* Registration hooks receive a registry object and call its ``add_*`` methods once,
  at start-up.  Names are unique: registering a second object under a taken name
  raises :class:`switchboard.errors.PluginError` naming both plugins.
* The hot path (a delivery) never calls ``pm.hook``: it calls the async methods of
  the objects registered here.  No hook is ``firstresult`` with coroutine
  implementations; the two ``firstresult`` hooks below are synchronous.
"""

from __future__ import annotations

from typing import Any

import pluggy

hookspec = pluggy.HookspecMarker("switchboard")


# --------------------------------------------------------------------------------------
# Start-up: configuration and storage
# --------------------------------------------------------------------------------------


@hookspec
def switchboard_config_schema() -> dict[str, Any] | None:  # type: ignore[empty-body]
    """Return a JSON Schema (draft 2020-12) for this plugin's config section.

    :return: the schema of ``[plugins.<name>]`` in the TOML config, or None when the
        plugin takes no config.  Called once while the config is validated; every
        result is applied, keyed by the plugin's registered name.
    """


@hookspec
def switchboard_migrations(register: Any) -> None:
    """Contribute SQL migrations.

    :param register: a :class:`switchboard.registry.MigrationRegistry`; call
        ``register.add_directory(plugin, path)`` with a directory of numbered
        ``NNNN_name.sql`` files.  Plugin migrations are recorded in
        ``schema_migrations`` under ``<plugin>/<file>`` and run after the host's own,
        in the plugin's file order, each in its own transaction.
    """


@hookspec
def switchboard_startup(app: Any) -> Any:
    """Called once when the service (or a CLI command) has its config and store ready.

    :param app: the :class:`switchboard.runtime.Runtime` (config, store, registries).
    :return: None, or an awaitable the host awaits before serving.  Every
        implementation runs; the order is pluggy's (later-registered first).
    """


@hookspec
def switchboard_shutdown(app: Any) -> Any:
    """Called once when the service or command stops; release what ``startup`` took.

    :param app: the :class:`switchboard.runtime.Runtime`.
    :return: None, or an awaitable the host awaits.  Errors are logged with the
        plugin's name and never stop the other implementations.
    """


# --------------------------------------------------------------------------------------
# Sources: who may POST, how a delivery is verified and identified
# --------------------------------------------------------------------------------------


@hookspec
def switchboard_register_sources(register: Any) -> None:
    """Register delivery sources (``cairn``, ``gitea``, ``github``, ``generic``, ...).

    :param register: a :class:`switchboard.registry.SourceRegistry`; call
        ``register.add(source)`` with an object satisfying
        :class:`switchboard.sources.Source`: a ``name``, a ``trust_mode``
        (``"signed"`` or ``"token"``), and ``verify(delivery, secret, now)`` which
        checks the raw bytes in constant time and returns a
        :class:`switchboard.sources.Verification` carrying the delivery id (the
        idempotency key's second half) and the event kind.
    """


# --------------------------------------------------------------------------------------
# Envelope: what rules see, projected from a verified delivery
# --------------------------------------------------------------------------------------


@hookspec
def switchboard_register_projections(register: Any) -> None:
    """Register envelope projections such as ``.artifact`` (cairn) or ``.issue`` (forges).

    :param register: a :class:`switchboard.registry.ProjectionRegistry`; call
        ``register.add(projection)`` with a
        :class:`switchboard.envelope.Projection`: a top-level ``name``, the
        ``sources`` it serves (several plugins may fill one name for different
        sources), the ``keys`` it always fills, and a pure
        ``build(source, kind, payload)`` returning a dict (missing keys become null)
        or None when it does not apply.  The envelope
        key is always present, null when the projection does not apply.
    """


@hookspec
def switchboard_register_subjects(register: Any) -> None:
    """Register subject extractors (the issue or artifact a delivery is about).

    :param register: a :class:`switchboard.registry.SubjectRegistry`; call
        ``register.add(extractor)`` with an object whose
        ``subject(source, kind, payload)`` returns a stable subject key (e.g.
        ``gitea:org/repo#12``) or None.  Subjects feed once-keys and work orders and
        never depend on tenant-written expressions.
    """


# --------------------------------------------------------------------------------------
# Routing: ordered stages between target resolution and the write
# --------------------------------------------------------------------------------------


@hookspec
def switchboard_register_routing_stages(register: Any) -> None:
    """Register routing stages (``rules``, ``llm``, ...).

    :param register: a :class:`switchboard.registry.StageRegistry`; call
        ``register.add(stage)`` with a :class:`switchboard.routing.model.RoutingStage`:
        a ``name`` and ``async route(ctx)`` taking a
        :class:`switchboard.routing.model.RoutingContext` (webhook row, envelope,
        grant) and returning a :class:`switchboard.routing.model.StageResult` (a
        decision, or none plus faults).  Stages are called per delivery through the
        registry, never through ``pm.hook``.  The config's ``routing.stages`` list enables and orders stages; the
        first stage that decides wins, otherwise the default action applies.
    """


@hookspec
def switchboard_register_rule_packs(register: Any) -> None:
    """Register rule packs: named, ready-made routing configs owners can install.

    :param register: a :class:`switchboard.registry.RulePackRegistry`; call
        ``register.add(name, config, description=...)``.  A pack's config is
        validated like any saved config when it is installed, never when registered.
    """


@hookspec
def switchboard_register_llm_providers(register: Any) -> None:
    """Register LLM providers for the triage stage.

    :param register: a :class:`switchboard.registry.LLMProviderRegistry`; call
        ``register.add(provider)`` with an object that has a ``name`` and
        ``async complete(model, system, prompt, schema, timeout)`` returning the
        model's raw text.  Providers never see the routing grant: the stage validates
        answers against it.
    """


# --------------------------------------------------------------------------------------
# Sinks: what happens after an event and its todos commit
# --------------------------------------------------------------------------------------


@hookspec
def switchboard_register_sinks(register: Any) -> None:
    """Register sinks, called after a delivery's transaction commits.

    :param register: a :class:`switchboard.registry.SinkRegistry`; call
        ``register.add(sink)`` with an object that has a ``name`` and
        ``async deliver(runtime, event, todos)`` (``event`` is the stored event row
        with its ``routing_trace``; ``todos`` are ``{id, endpoint_id, queue}``).  Sinks
        see newly created todos only (never a redelivery's, never a drop's).  A failing sink is logged with its plugin's
        name and never fails the delivery.
    """


# --------------------------------------------------------------------------------------
# Surfaces: MCP tools, CLI commands, HTTP routes
# --------------------------------------------------------------------------------------


@hookspec
def switchboard_register_mcp_tools(register: Any) -> None:
    """Register MCP tools on the agent surface (``/mcp`` and ``switchboard mcp``).

    :param register: a :class:`switchboard.registry.MCPToolRegistry`; call
        ``register.add_tool(name, fn, description=..., verb=...)``.  ``fn`` is
        ``async def fn(ctx: ToolContext, **arguments) -> T``: ``ctx`` is a
        :class:`switchboard.registry.ToolContext` (the runtime and the authenticated
        endpoint row); the parameters after it, with their type hints, become the input
        schema and the return annotation the output schema.  ``verb`` (default: the tool
        name) is the scope verb: ``tools/list`` shows the tool only to endpoints holding
        it, and a call without it is ``forbidden``.  Raise
        :mod:`switchboard.errors` exceptions; the caller sees ``"<code>: <message>"``.
    """


@hookspec
def switchboard_register_commands(register: Any) -> None:
    """Register ``switchboard`` CLI sub-commands.

    :param register: a :class:`switchboard.registry.CommandRegistry`; call
        ``register.add(name, configure, run, help=...)`` where ``configure(parser)``
        adds arguments and ``run(args, runtime)`` is async and returns an exit code
        (JSON goes to stdout).
    """


@hookspec
def switchboard_register_routes(app: Any) -> None:
    """Add HTTP routes to the Sanic application before it serves.

    :param app: the ``sanic.Sanic`` application; its ``ctx.runtime`` is the
        :class:`switchboard.runtime.Runtime`.
    """
