"""Config mistakes told in the operator's terms: where the value came from, what it must be, what was given."""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import math
import os
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard
from urllib.parse import urlsplit

from jsonschema import Draft202012Validator

from .contract.schemaerrors import Wording, first_schema_problem, schema_path
from .jsonwalk import path_of, walk

#: The longest value quoted back whole; a longer one is cut with "…".
GIVEN_MAX = 60

#: Words of a key whose value is never quoted back (only its length), as it may be a secret.
_SECRET_WORDS = {"secret", "password", "passwd", "token", "key", "dsn", "credentials"}


def _secret(path: tuple[str | int, ...]) -> bool:
    names = [p.lower() for p in path if isinstance(p, str)]
    return "database_url" in names or any(set(n.split("_")) & _SECRET_WORDS for n in names)


#: What the patterns of ``schemas/config.schema.json`` mean, for an operator who types them.
PATTERN_WORDS = {
    "^https?://[^/]+(/.*)?$": "an http:// or https:// URL",
    "^[^:]+:[0-9]{1,5}$": "host:port",
    "^([^:]+:[0-9]{1,5})?$": 'host:port, or "" (empty)',
}

#: TOML's names for JSON Schema's types (TOML has tables and arrays, and no null).
TOML_TYPE_WORDS = {
    "object": "a table",
    "array": "an array",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean (true or false)",
    "null": "null",
}


#: A URL's credentials (``user:pass@``, up to the host's last ``@``) and its query or
#: fragment (which may hold a key): what a message never quotes back.
_URL_CREDENTIALS = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/]*@")
_URL_QUERY = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://[^?#]*)([?#]).*", re.DOTALL)


def hide_url_secrets(text: str) -> str:
    """``text`` with a URL's credentials shown as ``…@`` and its query or fragment as
    ``?…`` or ``#…``; text that is no URL as it is."""
    return _URL_QUERY.sub(r"\1\2…", _URL_CREDENTIALS.sub(r"\1…@", text))


def shown_url(url: str) -> str:
    """``url`` quoted as written (JSON string escapes), without its secrets
    (:func:`hide_url_secrets`): how every message, trace and log line names a URL."""
    return json.dumps(hide_url_secrets(url), ensure_ascii=False)


def given(path: tuple[str | int, ...], value: Any) -> str | None:
    """A value from a config file as TOML writes it (a string quoted, cut when long; a
    secret by its length only), or None for a table or an array."""
    secret = _secret(path)
    if isinstance(value, bool):
        return "true" if value else "false"
    if secret and isinstance(value, str | int | float | dt.date | dt.time):
        # a secret mistyped (a number, a date) is still the secret: its length only
        kind = (
            "a string"
            if isinstance(value, str)
            else "a number"
            if isinstance(value, int | float)
            else "a date or time"
        )
        return f"{kind} of {len(str(value))} characters"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        text = hide_url_secrets(value)
        if len(text) > GIVEN_MAX:
            text = text[: GIVEN_MAX - 1] + "…"
        return json.dumps(text, ensure_ascii=False)
    for kind, py in (("date-time", dt.datetime), ("date", dt.date), ("time", dt.time)):
        if isinstance(value, py):
            return f"the {kind} {value.isoformat()}"
    return None


TOML_WORDING = Wording(types=TOML_TYPE_WORDS, null=False, patterns=PATTERN_WORDS, given=given)


@dataclass(frozen=True)
class Origin:
    """Where a config's values came from: the file, and the environment variables set
    (by the top-level key each one overrides)."""

    file: str | os.PathLike[str] | None = None
    env: Mapping[str, str] = field(default_factory=dict)

    def where(self, path: tuple[str | int, ...] = ()) -> str:
        """``SWITCHBOARD_ADDR``, ``config file x.toml: server.workers``, or (neither, for
        a config built in code) ``invalid config: server.workers``."""
        if path and str(path[0]) in self.env:  # the essentials: one value each
            return self.env[str(path[0])]
        key = schema_path(path)
        return f"config file {self.file}: {key}" if self.file else f"invalid config: {key}"


def schema_message(
    doc: Any, schema: dict[str, Any], origin: Origin, prefix: tuple[str, ...] = ()
) -> str | None:
    """The first problem of ``doc`` against ``schema``, told where it came from, or None."""
    problem = first_schema_problem(Draft202012Validator(schema).iter_errors(doc), TOML_WORDING)
    if problem is not None:
        return f"{origin.where((*prefix, *problem.path))}: {problem.problem}"
    path = non_finite(doc)
    if path is not None:
        return (
            f"{origin.where((*prefix, *path))}: must be a finite number"
            f" (got {given((*prefix, *path), _at(doc, path))})"
        )
    return None


def non_finite(doc: Any) -> tuple[str | int, ...] | None:
    """The path of the first nan or inf in ``doc``, or None.

    TOML writes them (``nan``, ``inf``) and a schema's bounds cannot refuse NaN (every
    comparison with it is false): every setting and plugin section is checked here, as no
    setting means them.
    """
    for place, value in walk(doc):
        if isinstance(value, float) and not math.isfinite(value):
            return path_of(place)
    return None


def _at(doc: Any, path: tuple[str | int, ...]) -> Any:
    for part in path:
        doc = doc[part]
    return doc


#: What a URL the host builds others from must be (``base_url``; an LLM provider's API root).
HTTP_URL_FORM = (
    "must be an http:// or https:// URL with a host, a port from 1 to 65535 if any,"
    " and no query or fragment"
)
#: A host name's characters (any letter or digit: an IDN is encoded when a request is made).
_HOST_PUNCTUATION = frozenset("-._")


def host_problem(host: str) -> str | None:
    """Why ``host`` (a name or an IPv4 address, as written) names no host, or None."""
    if not host:
        return "it has no host"
    if not all(c.isalnum() or c in _HOST_PUNCTUATION for c in host):
        return "the host has a character no host name has"
    return None


def http_url_problem(url: str, *, appended: str | None) -> str | None:
    """Why ``url`` is no http(s) URL a request can be sent to, or None.

    ``appended``: the path the URLs built from it add (``/chat/completions``), for which
    a query or a fragment is refused too (the path would land in it); None: used as it is.
    """
    try:
        parts = urlsplit(url)
    except ValueError:  # an unclosed [ of an IPv6 host
        return "it is not a URL"
    if parts.scheme not in ("http", "https"):
        return f'the scheme is "{parts.scheme}"' if parts.scheme else "it has no scheme"
    if any(c.isspace() or not c.isprintable() for c in url):
        return "it has a space or a control character"
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0 or parts.netloc.endswith(":"):  # "http://x:/": a port left out
        return "the port is not a number from 1 to 65535"
    if not parts.hostname:
        return "it has no host"
    if appended and (parts.query or parts.fragment or url.endswith(("?", "#"))):
        return f"the path would end in its query or fragment, not {appended}"
    if parts.netloc.rpartition("@")[2].startswith("["):
        try:
            ipaddress.IPv6Address(parts.hostname)
        except ValueError:
            return "the host is not an IPv6 address"
        return None
    return host_problem(parts.hostname)


def value_message(
    raw: Mapping[str, Any], origin: Origin, written: Mapping[str, Any] | None = None
) -> str | None:
    """What the schema cannot say: ports in range, pool sizes and backoffs in order; or None.

    ``written``: the settings as given (``raw`` is them over the defaults), so that a pair
    out of order names the one the user wrote.
    """
    for path, value in (
        (("addr",), raw.get("addr")),
        (("metrics", "addr"), (raw.get("metrics") or {}).get("addr")),
    ):
        if not isinstance(value, str) or not value:
            continue
        host, _, port = value.rpartition(":")
        if not 0 <= int(port) <= 65535:
            return (
                f"{origin.where(path)}: must be host:port with a port from 0 to 65535 (0: any"
                f" free port) (got {given(path, value)})"
            )
        problem = host_problem(host)
        if problem is not None:
            return (
                f"{origin.where(path)}: must be host:port with a host name or IPv4 address"
                f" (got {given(path, value)}: {problem})"
            )
    base_url = raw.get("base_url")
    if isinstance(base_url, str):
        problem = http_url_problem(base_url, appended="/webhooks/… or /mcp")
        if problem is not None:
            return (
                f"{origin.where(('base_url',))}: {HTTP_URL_FORM}"
                f" (got {given(('base_url',), base_url)}: {problem})"
            )
    for section, low_key, high_key in _ORDERED:
        values = raw.get(section) or {}
        low, high = values.get(low_key), values.get(high_key)
        if not (_is_number(low) and _is_number(high)) or low <= high:
            continue
        set_here = (written or {}).get(section)
        set_here = set_here if isinstance(set_here, Mapping) else {}
        if high_key in set_here and low_key not in set_here:
            return (
                f"{origin.where((section, high_key))}: must not be below"
                f" {section}.{low_key} (got {high_key} = {high}, {low_key} = {low}: its default)"
            )
        return (
            f"{origin.where((section, low_key))}: must not be above"
            f" {section}.{high_key} (got {low_key} = {low}, {high_key} = {high})"
        )
    return None


def _is_number(value: Any) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


#: Settings that bound one another: (section, the lower, the higher), each as set or default.
_ORDERED = (
    ("server", "pool_min_size", "pool_max_size"),
    ("todos", "backoff_base_seconds", "backoff_max_seconds"),
)


def no_settings_message(name: str, section: Mapping[str, Any], origin: Origin) -> str:
    """A section of settings for a plugin that declares none (they would be ignored)."""
    keys = ", ".join(sorted(section))
    return (
        f"{origin.where(('plugins', name))}: the {name} plugin takes no settings (got {keys});"
        f" remove the [plugins.{name}] section"
    )


#: A key path as a plugin writes one (``providers[1].name``), then ": ".
_KEY_PATH = re.compile(r"([A-Za-z_][\w-]*(?:\[\d+\]|\.[A-Za-z_][\w-]*)*): ")
#: Already told where it came from (the host's words): kept as it is.
_LOCATED = re.compile(r"config file |SWITCHBOARD_[A-Z_]+: ")


def _key_path(text: str) -> tuple[str | int, ...]:
    return tuple(
        int(index) if index else name
        for index, name in re.findall(r"\[(\d+)\]|([A-Za-z_][\w-]*)", text)
    )


def plugin_message(name: str, message: str, keys: Collection[str], origin: Origin) -> str:
    """A plugin's ``ConfigError`` about its own ``[plugins.<name>]`` section, told where the
    value came from, in the plugin's own words.

    A plugin sees only its section, so it names a key relative to it (``providers[1].name:
    ...``, whose first name is one of the section's ``keys``), or the section as it knows
    it (``[plugins.llm] providers[1].name: ...``, ``plugins.llm.providers[1].name: ...``),
    perhaps after ``invalid config: ``; that location is replaced by the host's
    (``config file x.toml: plugins.llm.providers[1].name: ...``). A message naming no key
    is told as about the section.
    """
    if _LOCATED.match(message):
        return message
    text = message.removeprefix("invalid config: ")
    path: tuple[str | int, ...] = ()
    for head in (f"[plugins.{name}]", f"plugins.{name}"):
        if text.startswith(f"{head}: "):
            text = text[len(head) + 2 :]
            break
        if text.startswith((f"{head} ", f"{head}.")):
            # "[plugins.llm] providers[1]: ..." or "plugins.llm.providers[1]: ...": the
            # key that follows is the section's, whatever its name
            text = text[len(head) + 1 :]
            found = _KEY_PATH.match(text)
            if found:
                path, text = _key_path(found[1]), text[found.end() :]
            break
    else:
        found = _KEY_PATH.match(text)
        # A leading word that is no key of the section is the message's own ("error: ...").
        if found and _key_path(found[1])[0] in keys:
            path, text = _key_path(found[1]), text[found.end() :]
    return f"{origin.where(('plugins', name, *path))}: {text}"
