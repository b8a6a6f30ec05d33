"""The one exception tree: what plugins raise and the host maps to HTTP and MCP.

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
