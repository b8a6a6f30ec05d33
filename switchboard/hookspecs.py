"""The plugin contract: every hook Switchboard calls, grouped by the phase that calls it.

Conventions (shared by every hook here):

* Hooks are called with keyword arguments only; an implementation may accept fewer
  arguments than the spec lists, so specs can grow without breaking plugins.
* Every type named here is importable from :mod:`switchboard.plugin`, the one module a
  plugin imports from.
* Registration hooks receive a registry (``register``) and call its ``add*`` method
  once per object, at start-up; they may also take ``config``: the plugin's own
  ``[plugins.<name>]`` section, validated against the schema its
  :func:`switchboard_config_schema` returned, with that schema's top-level ``default``
  values filled in. Names are unique: registering a second object under a taken name
  raises :class:`switchboard.plugin.PluginError` naming both plugins.
* The hot path (a delivery) never calls ``pm.hook``: it calls the async methods of the
  objects registered here. No hook is ``firstresult``.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    # The contract only: the hooks name what plugins receive, never the host's classes.
    from .contract import (
        CommandRegistry,
        LLMProviderRegistry,
        MCPToolRegistry,
        MigrationRegistry,
        ProjectionRegistry,
        RulePackRegistry,
        Runtime,
        SinkRegistry,
        SourceRegistry,
        StageRegistry,
        SubjectRegistry,
    )

hookspec = pluggy.HookspecMarker("switchboard")

#: What a plugin's config section holds: JSON-like data, defaults filled in.
PluginConfig = dict[str, Any]


# --------------------------------------------------------------------------------------
# Start-up: configuration and storage
# --------------------------------------------------------------------------------------


@hookspec
def switchboard_config_schema() -> dict[str, Any] | None:  # type: ignore[empty-body]
    """Return a JSON Schema (draft 2020-12) for this plugin's config section.

    :return: the schema of ``[plugins.<name>]`` in the TOML config, or None when the
        plugin takes no config. Called once while the config is validated; a section
        that does not validate stops start-up with an error naming the key. Top-level
        ``default`` values are filled in before the plugin sees its section.
    """


@hookspec
def switchboard_check_config(config: PluginConfig) -> None:
    """Check what this plugin's config section means, beyond what its schema can say.

    :param config: this plugin's ``[plugins.<name>]`` section, valid by its schema, with
        its defaults filled in. Called once while the config is loaded, by ``serve``
        (before the database or any worker starts) and every command that reads the
        config. Raise :class:`switchboard.plugin.ConfigError` worded about the section,
        the key first (``hosts[1]: 'a b' is not a host name``): the host puts where the
        value came from in front (``config file x.toml: plugins.<name>.hosts[1]: ...``).
    """


@hookspec
def switchboard_migrations(register: MigrationRegistry, config: PluginConfig) -> None:
    """Contribute SQL migrations.

    :param register: call ``register.add_directory(plugin, path)`` with a directory of
        numbered ``NNNN_name.sql`` files. Plugin migrations are recorded in
        ``schema_migrations`` under ``<plugin>/<file>`` and run after the host's own,
        in the plugin's file order, each in its own transaction.
    :param config: this plugin's section.
    """


@hookspec
def switchboard_startup(runtime: Runtime, app: Runtime) -> Awaitable[None] | None:
    """Called once per server worker when ``switchboard serve`` has its config, registries and store ready.

    CLI commands do not call it (they start what they need lazily); they do call
    :func:`switchboard_shutdown` when they end, so a plugin releases there whatever it
    took, whether ``startup`` ran or not.

    :param runtime: the :class:`switchboard.plugin.Runtime` (``config``, ``registries``,
        ``stages``, ``store`` once opened, and ``state``, a dict where a plugin keeps
        per-process state under its own name).
    :param app: the same Runtime, under its original name (kept for existing plugins).
    :return: None, or an awaitable the host awaits before serving. Every
        implementation runs; an exception stops start-up naming the plugin.
    """


@hookspec
def switchboard_shutdown(runtime: Runtime, app: Runtime) -> Awaitable[None] | None:
    """Called once when a server worker or a CLI command stops; release what the plugin took.

    :param runtime: the :class:`switchboard.plugin.Runtime`.
    :param app: the same Runtime, under its original name.
    :return: None, or an awaitable the host awaits. Errors are logged with the
        plugin's name and never stop the other implementations.
    """


# --------------------------------------------------------------------------------------
# Sources: who may POST, how a delivery is verified and identified
# --------------------------------------------------------------------------------------


@hookspec
def switchboard_register_sources(register: SourceRegistry, config: PluginConfig) -> None:
    """Register delivery sources (``cairn``, ``gitea``, ``github``, ``generic``, ...).

    :param register: call ``register.add(source)`` with a
        :class:`switchboard.plugin.Source`:

        * ``name`` (the ``--source`` of ``webhook create``) and ``trust_mode``
          (``"signed"``: an HMAC proves the body; ``"token"``: only the secret URL does);
        * ``verify(delivery, secret, now) -> Verification``: check the raw bytes in
          constant time; the verdict carries the delivery id (the idempotency key's
          second half) and the event kind. ``ok=False`` is a 401 and stores nothing.

        Optional, recognised by their methods:

        * ``identify(headers, body) -> Identity``
          (:class:`switchboard.plugin.IdentifyingSource`): the kind and delivery id
          without verifying. ``verify`` should report the same through the same
          function; dry runs over a sample (``rules test``, ``test_webhook_rules``)
          use it, so rules see the kind the live delivery would carry.
        * ``sign(body, secret, kind) -> headers`` and
          ``prepare(body, *, stamp, now) -> bytes``
          (:class:`switchboard.plugin.ProducerSide`): what ``switchboard send`` uses to
          deliver as the producer would (``prepare`` stamps fresh ids or clocks).
          A source without ``sign`` is not offered by ``send --source``.
    :param config: this plugin's section.
    """


# --------------------------------------------------------------------------------------
# Envelope: what rules see, projected from a verified delivery
# --------------------------------------------------------------------------------------


@hookspec
def switchboard_register_projections(register: ProjectionRegistry, config: PluginConfig) -> None:
    """Register envelope projections such as ``.artifact`` (cairn) or ``.issue`` (forges).

    :param register: call ``register.add(projection)`` with a
        :class:`switchboard.plugin.Projection`: a top-level ``name``, the ``sources`` it
        serves (several plugins may fill one name for different sources), the ``keys``
        it always fills, a pure ``build(source, kind, payload)`` (also given
        ``headers=``, sanitized and lower-cased, when the projection sets
        ``headers=True``) returning a dict
        (missing keys become null) or None when it does not apply, and optionally a
        ``title_key`` whose string titles the delivery's todos and an ``actor_key``
        naming who caused the delivery (shown to LLM triage). The envelope key is
        always present, null when the projection does not apply; a projection never
        overrides a switchboard fact (``.source``, ``.verified`` ...).
    :param config: this plugin's section.
    """


@hookspec
def switchboard_register_subjects(register: SubjectRegistry, config: PluginConfig) -> None:
    """Register subject extractors (the issue or artifact a delivery is about).

    :param register: call ``register.add(extractor)`` with a
        :class:`switchboard.plugin.SubjectExtractor`: a ``name`` and a pure
        ``subject(source, kind, payload)`` parsing the verified body, returning a stable
        subject key (``gitea:org/repo#12``, ``cairn:<id>``), or a mapping with that key
        under ``"key"`` plus the subject's fields, or None. The first extractor with an
        answer wins. Subjects are read only for ``once`` and ``work_order`` actions: they
        feed the once key and the work order's ``subject``, and never depend on
        tenant-written expressions.
    :param config: this plugin's section.
    """


# --------------------------------------------------------------------------------------
# Routing: ordered stages between target resolution and the write
# --------------------------------------------------------------------------------------


@hookspec
def switchboard_register_routing_stages(register: StageRegistry, config: PluginConfig) -> None:
    """Register routing stages (``rules``, ``llm``, ...).

    :param register: call ``register.add(stage)`` with a
        :class:`switchboard.plugin.RoutingStage`: a ``name`` and ``async route(ctx)``
        taking a :class:`switchboard.plugin.RoutingContext` (the webhook's
        :class:`~switchboard.plugin.RoutingConfig`, the envelope, the grant, the faults of
        earlier stages, and ``runtime``: the :class:`switchboard.plugin.Runtime` with its
        store and registries on a live delivery or a dry run over a webhook, None
        offline) and returning a :class:`switchboard.plugin.StageResult` (a decision, or
        none plus faults). A stage that decides by falling back builds its decision with
        ``default_decision(ctx.grant, ctx.config.default_action, ctx.faults, cause=...)``.
        A stage may also define ``async validate(config)``
        (:class:`switchboard.plugin.ValidatingStage`), called after the host's own
        checks whenever a routing config is saved or dry-run; it raises
        :class:`switchboard.plugin.RuleValidationError` (see ``rule_error``). The
        config's ``routing.stages`` list enables and orders stages; the first stage
        that decides wins, otherwise the default action applies. History (diff,
        explain, lint) replays every stage in that order: re-run on the stored envelope,
        unless the stage sets ``replay = "stored"`` (``REPLAY_STORED``: its verdict is
        then read from each event's stored trace, as the ``llm`` stage's is).
    :param config: this plugin's section (a stage reads its limits here).
    """


@hookspec
def switchboard_register_rule_packs(register: RulePackRegistry, config: PluginConfig) -> None:
    """Register rule packs: named, ready-made routing configs owners can install.

    :param register: call ``register.add_pack(name, config, description=...)`` where
        ``config`` is a routing config document (``{rules, default_action?, params?}``): a
        ``set_webhook_rules`` body without ``webhook_id``, naming queues, never endpoint
        ids (``exclusive`` picks the endpoint). Packs are listed by ``switchboard packs``
        and the MCP tool ``list_rule_packs``, and installed on a webhook by
        ``install_rule_pack``; a pack's config is validated like any saved config when it
        is installed, never when registered.
    :param config: this plugin's section.
    """


@hookspec
def switchboard_register_llm_providers(register: LLMProviderRegistry, config: PluginConfig) -> None:
    """Register LLM providers for the triage stage.

    :param register: call ``register.add(provider)`` with a
        :class:`switchboard.plugin.LLMProvider`: a ``name`` (what an endpoint's triage
        config names as its ``provider``) and
        ``async complete(model, system, prompt, schema, timeout)`` returning the model's
        raw text, raising ``TimeoutError`` past ``timeout`` seconds and any other
        exception on a transport or server error. Providers never see the routing grant:
        the stage validates answers against it and the schema.
    :param config: this plugin's section (API endpoints, key files ...).
    """


# --------------------------------------------------------------------------------------
# Sinks: what happens after an event and its todos commit
# --------------------------------------------------------------------------------------


@hookspec
def switchboard_register_sinks(register: SinkRegistry, config: PluginConfig) -> None:
    """Register sinks, called after a delivery's transaction commits.

    :param register: call ``register.add(sink)`` with a
        :class:`switchboard.plugin.Sink`: a ``name`` and
        ``async deliver(runtime, event, todos)``, where ``event`` is a
        :class:`switchboard.plugin.SinkEvent` (the stored event with its id, raw body,
        headers and ``routing_trace``) and ``todos`` are
        :class:`switchboard.plugin.SinkTodo` rows (``id``, ``endpoint_id``,
        ``queue``). Sinks see newly created todos only (never a redelivery's, never a
        drop's). A failing sink is logged with its plugin's name and never fails the
        delivery. A sink that also has ``async deliver_many(runtime, batch)`` (``batch``:
        ``(event, todos)`` pairs) is called once per turn of the event loop with all the
        events that committed in it, instead of through ``deliver``. A sink that only
        wakes listeners declares ``at_commit = CommitNotify(channel)`` instead of
        ``deliver`` (:class:`switchboard.plugin.CommitSink`): the statement that creates
        the todos sends its ``NOTIFY``, heard when they commit.
    :param config: this plugin's section.
    """


# --------------------------------------------------------------------------------------
# Surfaces: MCP tools, CLI commands, HTTP routes
# --------------------------------------------------------------------------------------


@hookspec
def switchboard_register_mcp_tools(register: MCPToolRegistry, config: PluginConfig) -> None:
    """Register MCP tools on the agent surface (``/mcp`` and ``switchboard mcp``).

    :param register: call ``register.add_tool(name, fn, description=..., verb=...)``.
        ``fn`` is ``async def fn(ctx: ToolContext, **arguments) -> T``: ``ctx`` is a
        :class:`switchboard.plugin.ToolContext` (the runtime and the authenticated
        endpoint row); the parameters after it, with their type hints, become the
        input schema and the return annotation the output schema. ``verb`` (default:
        the tool name) is the scope verb: ``tools/list`` shows the tool only to
        endpoints holding it, and a call without it is ``forbidden``. Raise
        :class:`switchboard.plugin.ServiceError` subclasses; the caller sees
        ``"<code>: <message>"``.
    :param config: this plugin's section.
    """


@hookspec
def switchboard_register_commands(register: CommandRegistry, config: PluginConfig) -> None:
    """Register ``switchboard`` CLI sub-commands.

    :param register: call ``register.add_command(name, configure, run, help=...,
        needs_store=True)`` where ``configure(parser)`` (or ``configure(parser,
        runtime)``, to offer what is installed and enabled) adds arguments to an
        ``argparse`` parser and ``run(args, runtime)`` is async and returns an exit code
        (JSON goes to stdout). ``needs_store=False`` runs without opening the database.
        With the embedded database, a command refuses to run where there is none yet
        (naming the data dir) unless ``creates_database`` (a bool, or ``f(args)``) says it
        may create it: only what is useful on an empty database should.
    :param config: this plugin's section.
    """


@hookspec
def switchboard_register_routes(app: Any, runtime: Runtime) -> None:
    """Add HTTP routes to the Sanic application before it serves.

    :param app: the ``sanic.Sanic`` application (``app.ctx.runtime`` is the runtime).
    :param runtime: the :class:`switchboard.plugin.Runtime`.
    """
