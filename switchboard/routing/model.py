"""The routing types where the host's routing code imports them (they live in the contract).

:mod:`switchboard.contract.routing` holds the plain data (grants, faults, decisions, configs)
and :mod:`switchboard.contract.runtime` the stage protocol and its context.
"""

from __future__ import annotations

from ..contract.routing import (
    CAUSE_DEFAULT_NOT_GRANTED,
    CAUSE_LLM_BUDGET_EXHAUSTED,
    CAUSE_LLM_ERROR,
    CAUSE_LLM_INVALID_ANSWER,
    CAUSE_LLM_LOW_CONFIDENCE,
    CAUSE_LLM_TIMEOUT,
    CAUSE_LLM_UNKNOWN_QUEUE,
    CAUSE_NO_MATCH,
    CAUSE_RULE_NOT_GRANTED,
    DISPOSITION_DROPPED,
    DISPOSITION_REPEAT,
    DISPOSITION_ROUTED,
    DISPOSITIONS,
    FAULT_CAUSES,
    LLM_CAUSES,
    STAGE_DEFAULT,
    STAGE_LLM,
    STAGE_RULE,
    Decision,
    Fault,
    Grant,
    LLMProvider,
    MatchResult,
    RoutingConfig,
    StageResult,
    Target,
    ValidatingStage,
    json_copy,
)
from ..contract.runtime import RoutingContext, RoutingStage

__all__ = [
    "CAUSE_DEFAULT_NOT_GRANTED",
    "CAUSE_LLM_BUDGET_EXHAUSTED",
    "CAUSE_LLM_ERROR",
    "CAUSE_LLM_INVALID_ANSWER",
    "CAUSE_LLM_LOW_CONFIDENCE",
    "CAUSE_LLM_TIMEOUT",
    "CAUSE_LLM_UNKNOWN_QUEUE",
    "CAUSE_NO_MATCH",
    "CAUSE_RULE_NOT_GRANTED",
    "DISPOSITIONS",
    "DISPOSITION_DROPPED",
    "DISPOSITION_REPEAT",
    "DISPOSITION_ROUTED",
    "Decision",
    "FAULT_CAUSES",
    "Fault",
    "Grant",
    "LLMProvider",
    "LLM_CAUSES",
    "MatchResult",
    "RoutingConfig",
    "RoutingContext",
    "RoutingStage",
    "STAGE_DEFAULT",
    "STAGE_LLM",
    "STAGE_RULE",
    "StageResult",
    "Target",
    "ValidatingStage",
    "json_copy",
]
