"""The exception tree's single mapping to HTTP statuses and MCP error codes.

The tree itself is part of the plugin contract (:mod:`switchboard.contract.errors`); it is
re-exported here, where the host has always imported it from.

Every HTTP error body is ``{"error": message, "code": code}`` (:func:`error_body`).
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
    "error_body",
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

#: Seconds a client should wait before retrying a 503 (the ``Retry-After`` header).
RETRY_AFTER_SECONDS = 2


#: The code an HTTP error body carries for each status, when no ServiceError with its own
#: code raised it: the framework's 404 and 405, the size limits, the receiver's replies,
#: and every other 4xx Sanic can raise (``internal`` is a 500's only).
_HTTP_CODE = {
    400: "invalid_argument",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    408: "request_timeout",
    409: "conflict",
    413: "payload_too_large",
    414: "uri_too_long",
    416: "range_not_satisfiable",
    417: "expectation_failed",
    431: "headers_too_large",
    503: "unavailable",
}

#: What the body says for an error the framework raised. Never the framework's own text:
#: Sanic's 404 and 405 messages quote the path, and an ingest URL's path is its token.
_HTTP_MESSAGE = {
    400: "bad request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not found",
    405: "method not allowed",
    408: "request timeout",
    413: "payload too large",
    414: "request URI too long",
    416: "range not satisfiable",
    417: "expectation failed",
    431: "request headers too large",
    500: "internal error",
    503: "unavailable: retry later",
}


#: How many characters of a caller's value a message echoes: an id or a name is not
#: bounded before it is looked up, and a megabyte echoed (twice, over MCP) is past the
#: 1 MiB event a stock MCP client accepts.
ECHO_MAX = 100


def clip(value: object) -> str:
    """``value`` as text, cut to :data:`ECHO_MAX` characters and ``…``, for a message."""
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= ECHO_MAX else text[:ECHO_MAX] + "…"


def error_body(status: int, message: str | None = None) -> dict[str, str]:
    """Every HTTP error body's shape, ``{"error": message, "code": code}``; without
    ``message``, the status's fixed one (which echoes nothing of the request)."""
    text = message if message is not None else _HTTP_MESSAGE.get(status, "error")
    return {"error": text, "code": _HTTP_CODE.get(status, "internal")}


def http_status(exc: BaseException) -> int:
    """The HTTP status for ``exc`` (500 for anything unexpected)."""
    for cls in type(exc).__mro__:
        if cls in _HTTP_STATUS:
            return _HTTP_STATUS[cls]
    return 500


def mcp_code(exc: BaseException) -> str:
    """The MCP error code for ``exc`` (``internal`` for anything unexpected).

    The code the CLI and the console show for the same cause: no surface renames one
    (a typo'd queue is ``not_granted`` from ``rules check`` and over MCP alike).
    """
    if not isinstance(exc, SwitchboardError):
        return "internal"
    return str(getattr(exc, "code", "internal"))
