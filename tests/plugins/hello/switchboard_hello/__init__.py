"""switchboard-hello: a third-party plugin written from ``switchboard.plugin`` alone.

It implements every hook in ``switchboard.hookspecs``: the ``acme`` source with its
``.acme`` projection and a JSON-lines sink (the README's example, in ``acme.py``), and the
rest of the contract in ``extras.py``. The test suite installs it like any other package.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from switchboard.plugin import (
    CommandRegistry,
    ConfigError,
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
    hookimpl,
)

from .acme import ACME_PROJECTION, AcmeSource, JsonLinesSink
from .extras import (
    ACME_URGENT_PACK,
    AcmeBell,
    AcmeSubjects,
    EchoProvider,
    HelloStage,
    add_status_route,
    greeting_command,
    greeting_tool,
)

MIGRATIONS = Path(__file__).with_name("migrations")

CONFIG_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "greeting": {"type": "string", "maxLength": 40, "default": "hello"},
        "sink_path": {"type": "string", "minLength": 1},
        "bell_channel": {"type": "string", "minLength": 1},
    },
}


@hookimpl
def switchboard_config_schema() -> dict[str, Any]:
    """``[plugins.hello]``: a greeting, where the sink writes (no sink without it) and the
    channel the bell rings on (no bell without it)."""
    return CONFIG_SCHEMA


@hookimpl
def switchboard_check_config(config: dict[str, Any]) -> None:
    """What the schema cannot say: the sink's file is an absolute path (a relative one
    would land wherever ``serve`` happened to start)."""
    path = config.get("sink_path")
    if path is not None and not Path(path).is_absolute():
        raise ConfigError(f"sink_path: must be an absolute path (got {path!r})")


@hookimpl
def switchboard_register_sources(register: SourceRegistry) -> None:
    register.add(AcmeSource())


@hookimpl
def switchboard_register_projections(register: ProjectionRegistry) -> None:
    register.add(ACME_PROJECTION)


@hookimpl
def switchboard_register_sinks(register: SinkRegistry, config: dict[str, Any]) -> None:
    if "sink_path" in config:
        register.add(JsonLinesSink(config["sink_path"]))
    if "bell_channel" in config:
        register.add(AcmeBell(config["bell_channel"]))


# The rest of the contract ------------------------------------------------------------


@hookimpl
def switchboard_migrations(register: MigrationRegistry) -> None:
    register.add_directory("hello", MIGRATIONS)


@hookimpl
def switchboard_register_subjects(register: SubjectRegistry) -> None:
    register.add(AcmeSubjects())


@hookimpl
def switchboard_register_routing_stages(register: StageRegistry) -> None:
    register.add(HelloStage())


@hookimpl
def switchboard_register_rule_packs(register: RulePackRegistry) -> None:
    register.add_pack(
        "acme-urgent", ACME_URGENT_PACK, description="Acme tickets marked urgent go to triage"
    )


@hookimpl
def switchboard_register_llm_providers(register: LLMProviderRegistry) -> None:
    register.add(EchoProvider())


@hookimpl
def switchboard_register_mcp_tools(register: MCPToolRegistry, config: dict[str, Any]) -> None:
    register.add_tool("hello", greeting_tool(config["greeting"]), verb="hello")


@hookimpl
def switchboard_register_commands(register: CommandRegistry, config: dict[str, Any]) -> None:
    register.add_command(
        "hello",
        lambda parser: None,
        greeting_command(config["greeting"]),
        help="say hello",
        needs_store=False,
    )


@hookimpl
def switchboard_register_routes(app: Any, runtime: Runtime) -> None:
    add_status_route(app, runtime)


@hookimpl
def switchboard_startup(runtime: Runtime) -> None:
    runtime.state["hello"] = {"started": True, "sources": runtime.registries.sources.names()}


@hookimpl
def switchboard_shutdown(runtime: Runtime) -> None:
    runtime.state.pop("hello", None)
