"""Header sanitizing: what is persisted and shown to rules never carries a credential."""

from __future__ import annotations

import re
from collections.abc import Mapping

from .sources import Headers

REDACTED = "«redacted»"

HeadersLike = Headers | Mapping[str, str] | list[tuple[str, str]]

#: Header names whose whole value is a credential.
_SECRET_NAMES = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie"})
#: Name fragments that mark a header as secret-bearing (``x-hub-signature-256``,
#: ``x-api-key``, ``x-auth-token``...); over-redacting a harmless header costs a rule
#: author a field, under-redacting leaks a credential into storage.
_SECRET_FRAGMENTS = (
    "signature",
    "token",
    "secret",
    "api-key",
    "api_key",
    "apikey",
    "auth",
    "password",
    "session",
    "credential",
    "private",
)

#: Query/parameter names whose value is redacted inside other header values: exact short
#: names (substring matching ``key`` or ``sig`` would hit ``monkey`` or ``design``)...
_SECRET_PARAMS = frozenset({"key", "sig", "auth", "apikey", "api_key", "api-key"})
#: ...and fragments, which also catch ``access_token``, ``client_secret``, ``X-Amz-Signature``.
_SECRET_PARAM_FRAGMENTS = ("token", "secret", "signature", "password", "passwd", "credential")

# A ``name=value`` pair at the start of a value or after a URL/parameter separator. The
# value stops at the next separator or at characters that end a URL inside a header
# (``<https://…?token=x>; rel="next"``).
_PARAM = re.compile(
    r"(?P<lead>^|[?&;,\s])(?P<name>[A-Za-z0-9_.\-\[\]]+)=(?P<value>[^&;,\s#<>\"']*)"
)


def _secret_name(name: str) -> bool:
    return name in _SECRET_NAMES or any(f in name for f in _SECRET_FRAGMENTS)


def _secret_param(name: str) -> bool:
    lowered = name.lower()
    return lowered in _SECRET_PARAMS or any(f in lowered for f in _SECRET_PARAM_FRAGMENTS)


def _redact_param(match: re.Match[str]) -> str:
    if not match["value"] or not _secret_param(match["name"]):
        return match[0]
    return f"{match['lead']}{match['name']}={REDACTED}"


def redact_value(value: str) -> str:
    """``value`` with the values of secret-looking ``name=value`` parameters redacted."""
    # Cheap guard: most header values have no '=' at all.
    return _PARAM.sub(_redact_param, value) if "=" in value else value


def sanitize_headers(headers: HeadersLike) -> dict[str, str]:
    """Lower-cased names, secrets redacted, repeated headers joined with ``", "`` in order."""
    if isinstance(headers, Headers):
        pairs = headers.items()
    elif isinstance(headers, Mapping):
        pairs = list(headers.items())
    else:
        pairs = list(headers)
    out: dict[str, str] = {}
    for raw_name, raw_value in pairs:
        name = str(raw_name).lower()
        if _secret_name(name):
            # One marker however often it repeats: "«redacted», «redacted»" says nothing more.
            out[name] = REDACTED
            continue
        value = redact_value(str(raw_value))
        out[name] = f"{out[name]}, {value}" if name in out else value
    return out
