"""Header sanitizing: what is persisted and shown to rules never carries a credential."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

from .sources import Headers

REDACTED = "«redacted»"

HeadersLike = Headers | Mapping[str, str] | list[tuple[str, str]]

# The trade-off, everywhere below: over-redacting a harmless header costs a rule author a
# field, under-redacting leaks a credential into storage. Substrings are used only where
# they cannot over-match a common word; short marks (``sig``, ``key``) must be a whole word.

#: Header names whose whole value is a credential.
_SECRET_NAMES = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie"})
#: Name fragments that mark a header as secret-bearing (``x-hub-signature-256``,
#: ``x-api-key``, ``x-auth-token``, ``x-shopify-hmac-sha256``...).
_SECRET_FRAGMENTS = (
    "signature",
    "token",
    "secret",
    "api-key",
    "api_key",
    "apikey",
    "auth",
    "passw",
    "session",
    "credential",
    "private",
    "hmac",
)

#: Whole words (of header, parameter and JSON key names) that mark a secret:
#: ``x-request-sig`` but not ``design``, ``cf-access-jwt-assertion``, ``user_pwd``.
_SECRET_WORDS = frozenset({"sig", "jwt", "pwd"})
#: ``key`` as the last word is a secret (``x-functions-key``, ``ocp-apim-subscription-key``,
#: ``apiKey``) unless the word before it says it is an identifier; ``x-key-id`` names a key,
#: ``x-monkey`` and ``keep-alive`` have no ``key`` word at all.
_PUBLIC_KEY_QUALIFIERS = frozenset(
    {"event", "idempotency", "routing", "partition", "public", "sort"}
)

#: Query/parameter names (and JSON keys) redacted inside other header values: exact short
#: names (as substrings ``code`` or ``k`` would hit ``codec`` or ``kind``)...
_SECRET_PARAMS = frozenset({"auth", "apikey", "code", "k", "pass"})
#: ...and fragments, which also catch ``access_token``, ``client_secret``, ``X-Amz-Signature``.
_SECRET_PARAM_FRAGMENTS = ("token", "secret", "signature", "passw", "credential", "hmac")

# Words of a name: split at anything not a letter or digit and at camelCase humps
# (``subscriptionKey``, ``APIKey``); header names arrive lower-cased, so only separators split them.
_WORD = re.compile(r"[A-Z]+[0-9]*(?![a-z])|[A-Z]?[a-z]+[0-9]*|[0-9]+")

# A ``name=value`` pair at the start of a value or after a URL/parameter separator. The
# value stops at the next separator or at characters that end a URL inside a header
# (``<https://…?token=x>; rel="next"``).
_PARAM = re.compile(
    r"(?P<lead>^|[?&;,\s])(?P<name>[A-Za-z0-9_.\-\[\]]+)=(?P<value>[^&;,\s#<>\"']*)"
)
# The password of a URL's userinfo (``scheme://user:password@host``, scheme-relative
# ``//user:password@host`` alike): anchored on ``//``, not on the scheme, so a long value
# is scanned once. The authority ends at ``/ ? #``, so a greedy password runs to its last
# ``@`` as URL parsers read it (``https://u:p@ss@host``).
_USERINFO = re.compile(r"(?P<lead>//[^/?#@:\s<>\"'\\]*):(?P<password>[^/?#\s<>\"'\\]*)@")
# Lone surrogates a JSON value may carry as ``\ud800``; written back raw they could not be
# encoded to UTF-8 downstream, so they are escaped again.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _words(name: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(name)]


def _secret_words(words: list[str]) -> bool:
    if any(w in _SECRET_WORDS for w in words):
        return True
    if not words or words[-1] != "key":
        return False
    return len(words) < 2 or words[-2] not in _PUBLIC_KEY_QUALIFIERS


@lru_cache(maxsize=4096)
def _secret_name(name: str) -> bool:
    # Memoized: producers send the same few dozen header names on every delivery.
    return (
        name in _SECRET_NAMES
        or any(f in name for f in _SECRET_FRAGMENTS)
        or _secret_words(_words(name))
    )


def _secret_param(name: str) -> bool:
    lowered = name.lower()
    return (
        lowered in _SECRET_PARAMS
        or any(f in lowered for f in _SECRET_PARAM_FRAGMENTS)
        or _secret_words(_words(name))
    )


def _redact_param(match: re.Match[str]) -> str:
    if not match["value"] or not _secret_param(match["name"]):
        return match[0]
    return f"{match['lead']}{match['name']}={REDACTED}"


def _redact_userinfo(match: re.Match[str]) -> str:
    return f"{match['lead']}:{REDACTED}@" if match["password"] else match[0]


def _redact_json(node: Any) -> Any:
    """``node`` with secret-named keys' values redacted and every string run through the rules."""
    if isinstance(node, dict):
        return {
            k: REDACTED if _secret_param(k) and _carries(v) else _redact_json(v)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_redact_json(v) for v in node]
    return redact_value(node) if isinstance(node, str) else node


def _carries(value: Any) -> bool:
    # null, booleans and empty values hold no secret: they stay, as an empty ``token=`` does.
    return not (value is None or isinstance(value, bool) or value in ("", [], {}))


def _redact_json_text(value: str) -> str | None:
    """The redacted text of a JSON object/array ``value``; None when it does not parse."""
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        return None
    except (ValueError, RecursionError):
        # It parses as far as Python dares (a 5,000-digit number, nesting past the
        # recursion limit): nobody routes on that, and nobody may read a token out of it.
        return REDACTED
    if not isinstance(parsed, dict | list):
        return None
    try:
        redacted = _redact_json(parsed)
        if redacted == parsed:
            return value  # nothing secret: keep the producer's own spelling
        text = json.dumps(redacted, ensure_ascii=False, separators=(",", ":"))
    except (ValueError, RecursionError):
        return REDACTED
    return _SURROGATE.sub(lambda m: f"\\u{ord(m[0]):04x}", text)


def redact_value(value: str) -> str:
    """``value`` with URL passwords, secret ``name=value`` parameters and JSON secrets redacted."""
    if value.lstrip()[:1] in ("{", "["):
        redacted = _redact_json_text(value)
        if redacted is not None:
            return redacted
    # Cheap guards: most header values have neither '@' nor '='.
    if "@" in value:
        value = _USERINFO.sub(_redact_userinfo, value)
    return _PARAM.sub(_redact_param, value) if "=" in value else value


def sanitize_headers(headers: HeadersLike) -> dict[str, str]:
    """Lower-cased names, secrets redacted, repeated headers joined with ``", "`` in order."""
    if isinstance(headers, Headers):
        pairs = headers.items()
    elif isinstance(headers, Mapping):
        pairs = list(headers.items())
    else:
        pairs = list(headers)
    return joined_headers(sanitize_pairs(pairs))


def sanitize_pairs(pairs: Iterable[tuple[Any, Any]]) -> list[tuple[str, str]]:
    """Each header in arrival order: its lower-cased name and its value, secrets redacted."""
    out = []
    for raw_name, raw_value in pairs:
        name = str(raw_name).lower()
        out.append((name, REDACTED if _secret_name(name) else redact_value(str(raw_value))))
    return out


def joined_headers(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """:func:`sanitize_pairs`' output as :func:`sanitize_headers` answers it."""
    out: dict[str, str] = {}
    for name, value in pairs:
        if _secret_name(name):
            # One marker however often it repeats: "«redacted», «redacted»" says nothing more.
            out[name] = REDACTED
            continue
        out[name] = f"{out[name]}, {value}" if name in out else value
    return out
