"""The public plugin contract: everything a plugin imports, from one module.

A plugin (first-party or a third party's package) imports from here and nowhere else in
``switchboard``::

    from switchboard.plugin import hookimpl, Source, Verification, Projection

The hooks themselves are specified, with their arguments and types, in
:mod:`switchboard.hookspecs`. Names here are stable: they are extended, never renamed.
"""

from __future__ import annotations

from . import __version__, hookimpl
from .envelope import Projection
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
    Registries,
    RulePack,
    RulePackRegistry,
    SinkRegistry,
    SourceRegistry,
    StageRegistry,
    SubjectRegistry,
    ToolContext,
)
from .routing.config import MAX_RULES, check_structure, rule_error, validate_config
from .routing.decide import decide, default_decision
from .routing.dryrun import dry_run
from .routing.model import (
    DISPOSITION_DROPPED,
    DISPOSITION_ROUTED,
    DISPOSITIONS,
    FAULT_CAUSES,
    Decision,
    Fault,
    Grant,
    MatchResult,
    RoutingConfig,
    RoutingContext,
    RoutingStage,
    StageResult,
    Target,
    ValidatingStage,
)
from .routing.replay import sample_envelope, stored_envelope
from .runtime import Runtime
from .sinks import Sink, SinkEvent, SinkTodo
from .sources import (
    TRUST_SIGNED,
    TRUST_TOKEN,
    Delivery,
    Headers,
    IdentifyingSource,
    Identity,
    ProducerSide,
    Source,
    Verification,
    body_key,
    constant_time_equal,
    hmac_sha256_hex,
    identify,
    prepare_body,
    producer_side,
)

__all__ = [
    "DISPOSITIONS",
    "DISPOSITION_DROPPED",
    "DISPOSITION_ROUTED",
    "FAULT_CAUSES",
    "MAX_RULES",
    "TRUST_SIGNED",
    "TRUST_TOKEN",
    "CeilingExceeded",
    "Command",
    "CommandRegistry",
    "ConfigError",
    "Conflict",
    "Decision",
    "Delivery",
    "Fault",
    "Forbidden",
    "Grant",
    "Headers",
    "IdentifyingSource",
    "Identity",
    "InvalidArgument",
    "LLMProviderRegistry",
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
    "Runtime",
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
    "SubjectRegistry",
    "SwitchboardError",
    "Target",
    "ToolContext",
    "ValidatingStage",
    "Verification",
    "__version__",
    "body_key",
    "check_structure",
    "constant_time_equal",
    "decide",
    "default_decision",
    "dry_run",
    "hmac_sha256_hex",
    "hookimpl",
    "identify",
    "prepare_body",
    "producer_side",
    "rule_error",
    "sample_envelope",
    "stored_envelope",
    "validate_config",
]
