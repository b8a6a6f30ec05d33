"""The registries where the host imports them from (they live in the contract).

:mod:`switchboard.contract.registry` holds most of them; those of stages and sinks, and
``Registries``, are in :mod:`switchboard.contract.runtime`.
"""

from __future__ import annotations

from .contract.registry import (
    Command,
    CommandRegistry,
    LLMProviderRegistry,
    MCPTool,
    MCPToolRegistry,
    MigrationRegistry,
    NamedRegistry,
    ProjectionRegistry,
    RulePack,
    RulePackRegistry,
    SourceRegistry,
    SubjectRegistry,
    ToolContext,
)
from .contract.runtime import Registries, SinkRegistry, StageRegistry

__all__ = [
    "Command",
    "CommandRegistry",
    "LLMProviderRegistry",
    "MCPTool",
    "MCPToolRegistry",
    "MigrationRegistry",
    "NamedRegistry",
    "ProjectionRegistry",
    "Registries",
    "RulePack",
    "RulePackRegistry",
    "SinkRegistry",
    "SourceRegistry",
    "StageRegistry",
    "SubjectRegistry",
    "ToolContext",
]
