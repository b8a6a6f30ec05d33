"""First-party plugin: the ``llm`` routing stage (LLM triage), its providers and verbs.

Written against ``switchboard.plugin`` alone, as a third party's stage would be: the stage
(``stage.py``) runs after the rules for endpoints that opted in, the providers the
operator lists in ``[plugins.llm]`` (``providers.py``) answer it, its own tables
(``migrations/``) hold each endpoint's settings and the shared budget counters, and the
MCP tools ``get_llm_triage``/``set_llm_triage`` and ``switchboard llm`` manage them.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from switchboard.plugin import (
    CommandRegistry,
    LLMProviderRegistry,
    MCPToolRegistry,
    MigrationRegistry,
    StageRegistry,
    hookimpl,
)

from . import commands, tools
from .providers import build_provider
from .settings import CONFIG_SCHEMA, check_providers
from .stage import LLMStage

MIGRATIONS = Path(__file__).with_name("migrations")


@hookimpl
def switchboard_config_schema() -> dict[str, Any]:
    """``[plugins.llm]``: the providers offered and the ceilings on every endpoint."""
    return CONFIG_SCHEMA


@hookimpl
def switchboard_migrations(register: MigrationRegistry) -> None:
    """The triage settings and budget tables."""
    register.add_directory("llm", MIGRATIONS)


@hookimpl
def switchboard_register_routing_stages(register: StageRegistry, config: dict[str, Any]) -> None:
    """The ``llm`` stage, limited by this plugin's section."""
    register.add(LLMStage(config))


@hookimpl
def switchboard_register_llm_providers(
    register: LLMProviderRegistry, config: dict[str, Any]
) -> None:
    """One provider per ``[[plugins.llm.providers]]`` entry (``static`` or ``openai``);
    two of one name, or a ``base_url`` no request could be sent to, refused at start."""
    check_providers(config["providers"])
    for spec in config["providers"]:
        register.add(build_provider(spec))


@hookimpl
def switchboard_register_mcp_tools(register: MCPToolRegistry) -> None:
    """``get_llm_triage`` and ``set_llm_triage``: an endpoint manages its own triage."""
    for fn in tools.TOOLS:
        register.add_tool(fn.__name__, fn, description=inspect.cleandoc(fn.__doc__ or ""))


@hookimpl
def switchboard_register_commands(register: CommandRegistry) -> None:
    """``switchboard llm get|set|clear``."""
    commands.register(register)
