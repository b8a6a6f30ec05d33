"""The exception tree's single mapping to HTTP statuses and MCP error codes.

The tree itself is part of the plugin contract (:mod:`switchboard.contract.errors`); it is
re-exported here, where the host has always imported it from.
"""

from __future__ import annotations

from .contract.errors import (
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

__all__ = [
    "CeilingExceeded",
    "ConfigError",
    "Conflict",
    "Forbidden",
    "InvalidArgument",
    "NotFound",
    "PluginError",
    "RuleValidationError",
    "ServiceError",
    "StoreUnavailable",
    "SwitchboardError",
    "RETRY_AFTER_SECONDS",
    "http_status",
    "mcp_code",
]

_HTTP_STATUS: dict[type[SwitchboardError], int] = {
    InvalidArgument: 400,
    NotFound: 404,
    Forbidden: 403,
    CeilingExceeded: 403,
    Conflict: 409,
    StoreUnavailable: 503,
}

#: Rule-validation codes that surface under a different public code.
_MCP_CODE_ALIASES = {"not_granted": "forbidden"}


#: Seconds a client should wait before retrying a 503 (the ``Retry-After`` header).
RETRY_AFTER_SECONDS = 2


def http_status(exc: BaseException) -> int:
    """The HTTP status for ``exc`` (500 for anything unexpected)."""
    for cls in type(exc).__mro__:
        if cls in _HTTP_STATUS:
            return _HTTP_STATUS[cls]
    return 500


def mcp_code(exc: BaseException) -> str:
    """The MCP error code for ``exc`` (``internal`` for anything unexpected)."""
    code = getattr(exc, "code", "internal") if isinstance(exc, SwitchboardError) else "internal"
    return _MCP_CODE_ALIASES.get(code, code)
