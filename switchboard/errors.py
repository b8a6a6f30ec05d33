"""The one exception tree, and its single mapping to HTTP statuses and MCP error codes.

Every HTTP error body is ``{"error": message, "code": code}`` (:func:`error_body`).

SwitchboardError
├── ConfigError            invalid configuration (start-up stops)
├── PluginError            a plugin broke the contract (duplicate name, bad hook)
├── StoreUnavailable       the database cannot be reached          → 503 / unavailable
└── ServiceError           a request the service refuses, with a code
    ├── InvalidArgument    invalid_argument (and rule-validation codes) → 400
    ├── NotFound           not_found, rule_not_found               → 404
    ├── Forbidden          forbidden, forbidden_source_type        → 403
    ├── Conflict           conflict                                → 409
    └── CeilingExceeded    ceiling_exceeded                        → 403
"""

from __future__ import annotations

from typing import Any


class SwitchboardError(Exception):
    """Base of every error Switchboard raises on purpose."""


class ConfigError(SwitchboardError):
    """The configuration is invalid; the message names the key."""


class PluginError(SwitchboardError):
    """A plugin broke the contract."""


class StoreUnavailable(SwitchboardError):
    """The database is unreachable or failed mid-request.

    ``str()`` is a fixed public message; ``detail`` (the driver's own text, which can
    name hosts, users and databases) is for the log only, never for a response.
    """

    code = "unavailable"

    def __init__(self, message: str = "database unavailable", *, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail


class ServiceError(SwitchboardError):
    """A refusal with a stable machine-readable code."""

    code = "internal"

    def __init__(self, message: str, *, code: str | None = None, **details: Any) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.details = details

    def __str__(self) -> str:
        return self.message


class InvalidArgument(ServiceError):
    code = "invalid_argument"


class RuleValidationError(InvalidArgument):
    """A routing configuration was refused; ``message`` names the rule by index, id and name.

    ``code`` is one of ``invalid_rule``, ``invalid_expression``, ``forbidden_function``,
    ``invalid_params``, ``too_many_rules`` or ``not_granted``; ``index`` is the rule's
    position (None for the default action, params or the whole config).
    """

    def __init__(
        self,
        code: str,
        message: str,
        *,
        index: int | None = None,
        rule_id: str | None = None,
        rule_name: str | None = None,
    ) -> None:
        super().__init__(message, code=code, index=index, rule_id=rule_id, rule_name=rule_name)
        self.index = index
        self.rule_id = rule_id
        self.rule_name = rule_name


class NotFound(ServiceError):
    code = "not_found"


class Forbidden(ServiceError):
    code = "forbidden"


class Conflict(ServiceError):
    code = "conflict"


class CeilingExceeded(ServiceError):
    code = "ceiling_exceeded"


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


#: The code an HTTP error body carries for each status, when no ServiceError with its own
#: code raised it: the framework's 404 and 405, the size limits, the receiver's replies.
_HTTP_CODE = {
    400: "invalid_argument",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    431: "headers_too_large",
    503: "unavailable",
}

#: What the body says for an error the framework raised. Never the framework's own text:
#: Sanic's 404 and 405 messages quote the path, and an ingest URL's path is its token.
_HTTP_MESSAGE = {
    400: "bad request",
    404: "not found",
    405: "method not allowed",
    413: "payload too large",
    431: "request headers too large",
    503: "unavailable: retry later",
}


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
    """The MCP error code for ``exc`` (``internal`` for anything unexpected)."""
    code = getattr(exc, "code", "internal") if isinstance(exc, SwitchboardError) else "internal"
    return _MCP_CODE_ALIASES.get(code, code)
