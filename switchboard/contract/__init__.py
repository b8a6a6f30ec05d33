"""The plugin contract's types: what plugins implement or receive, importing nothing else.

A leaf: these modules import nothing of ``switchboard`` outside this package (a test walks
the imports), and the host's implementations import them, never the reverse. Plugins import
the same names from :mod:`switchboard.plugin`, which re-exports them with the host's helpers.

* :mod:`~switchboard.contract.errors`: the exception tree;
* :mod:`~switchboard.contract.sources`: deliveries, verdicts and the source protocols;
* :mod:`~switchboard.contract.envelope`: projections and subject extractors;
* :mod:`~switchboard.contract.routing`: grants, faults, decisions, routing configs, rule
  verdicts, and the validating-stage, verdict-stage and LLM-provider protocols;
* :mod:`~switchboard.contract.sinks`: the event and todos a sink is handed;
* :mod:`~switchboard.contract.registry`: the registries that name no runtime-bound type;
* :mod:`~switchboard.contract.runtime`: the :class:`Runtime` protocol, and what is handed it
  (the routing context and stage, the sink) with their registries and ``Registries``.
"""

from __future__ import annotations

from .envelope import (
    Projection,
    SubjectExtractor,
)
from .errors import (
    CeilingExceeded,
    ConfigError,
    Conflict,
    Forbidden,
    InvalidArgument,
    NotFound,
    PluginError,
    RuleValidationError,
    ServiceError,
    StoreUnavailable,
    SwitchboardError,
)
from .registry import (
    Command,
    CommandRegistry,
    LLMProviderRegistry,
    MCPTool,
    MCPToolRegistry,
    MigrationRegistry,
    ProjectionRegistry,
    RulePack,
    RulePackRegistry,
    SourceRegistry,
    SubjectRegistry,
    ToolContext,
)
from .routing import (
    CAUSE_LLM_BUDGET_EXHAUSTED,
    CAUSE_LLM_ERROR,
    CAUSE_LLM_INVALID_ANSWER,
    CAUSE_LLM_LOW_CONFIDENCE,
    CAUSE_LLM_TIMEOUT,
    CAUSE_LLM_UNKNOWN_QUEUE,
    DISPOSITION_DROPPED,
    DISPOSITION_REPEAT,
    DISPOSITION_ROUTED,
    DISPOSITIONS,
    FAULT_CAUSES,
    LLM_CAUSES,
    STAGE_LLM,
    Decision,
    Fault,
    Grant,
    LLMProvider,
    MatchResult,
    RoutingConfig,
    RuleVerdict,
    StageResult,
    Target,
    ValidatingStage,
    VerdictStage,
)
from .runtime import (
    Registries,
    RoutingContext,
    RoutingStage,
    Runtime,
    RuntimeConfig,
    RuntimeDatabase,
    RuntimeStore,
    Sink,
    SinkRegistry,
    StageRegistry,
)
from .sinks import (
    SinkEvent,
    SinkTodo,
)
from .sources import (
    MAX_DELIVERY_ID_BYTES,
    SIGNATURE_PREFIX,
    TRUST_SIGNED,
    TRUST_TOKEN,
    Delivery,
    Headers,
    IdentifyingSource,
    Identity,
    ProducerSide,
    Source,
    Verification,
)

__all__ = [
    "CAUSE_LLM_BUDGET_EXHAUSTED",
    "CAUSE_LLM_ERROR",
    "CAUSE_LLM_INVALID_ANSWER",
    "CAUSE_LLM_LOW_CONFIDENCE",
    "CAUSE_LLM_TIMEOUT",
    "CAUSE_LLM_UNKNOWN_QUEUE",
    "CeilingExceeded",
    "Command",
    "CommandRegistry",
    "ConfigError",
    "Conflict",
    "DISPOSITIONS",
    "DISPOSITION_DROPPED",
    "DISPOSITION_REPEAT",
    "DISPOSITION_ROUTED",
    "Decision",
    "Delivery",
    "FAULT_CAUSES",
    "Fault",
    "Forbidden",
    "Grant",
    "Headers",
    "IdentifyingSource",
    "Identity",
    "InvalidArgument",
    "LLMProvider",
    "LLMProviderRegistry",
    "LLM_CAUSES",
    "MAX_DELIVERY_ID_BYTES",
    "MCPTool",
    "MCPToolRegistry",
    "MatchResult",
    "MigrationRegistry",
    "NotFound",
    "PluginError",
    "ProducerSide",
    "Projection",
    "ProjectionRegistry",
    "Registries",
    "RoutingConfig",
    "RoutingContext",
    "RoutingStage",
    "RulePack",
    "RulePackRegistry",
    "RuleValidationError",
    "RuleVerdict",
    "Runtime",
    "RuntimeConfig",
    "RuntimeDatabase",
    "RuntimeStore",
    "SIGNATURE_PREFIX",
    "STAGE_LLM",
    "ServiceError",
    "Sink",
    "SinkEvent",
    "SinkRegistry",
    "SinkTodo",
    "Source",
    "SourceRegistry",
    "StageRegistry",
    "StageResult",
    "StoreUnavailable",
    "SubjectExtractor",
    "SubjectRegistry",
    "SwitchboardError",
    "TRUST_SIGNED",
    "TRUST_TOKEN",
    "Target",
    "ToolContext",
    "ValidatingStage",
    "VerdictStage",
    "Verification",
]
