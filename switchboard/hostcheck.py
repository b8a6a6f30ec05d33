"""Which Host and Origin values name this service (DNS-rebinding protection), matched exactly."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any
from urllib.parse import urlsplit

from .config import Config
from .errors import ConfigError

LOOPBACK = ("127.0.0.1", "localhost", "::1")

# A host is a bracketed IPv6 literal or a plain name (ASCII letters, digits, dot, dash,
# underscore). A ``base:*`` pattern stands for a port of digits only, and a value must parse
# whole: "starts with base:" would let ``127.0.0.1:80@evil.com`` through.
_NAME = r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)"
_PORT = r"[0-9]{1,5}"
HOST = re.compile(rf"(?P<base>{_NAME})(?::(?P<port>{_PORT}))?")
ORIGIN = re.compile(rf"(?P<base>[a-z][a-z0-9+.-]*://{_NAME})(?::(?P<port>{_PORT}))?")
HOST_PATTERN = re.compile(rf"{_NAME}(?::(?:{_PORT}|\*))?")
ORIGIN_PATTERN = re.compile(rf"[a-z][a-z0-9+.-]*://{_NAME}(?::(?:{_PORT}|\*))?")


def allowed(value: str, patterns: Collection[str], grammar: re.Pattern[str]) -> bool:
    """Whether ``value`` parses whole and equals a pattern, or its base does with ``:*``."""
    m = grammar.fullmatch(value)
    if m is None:
        return False
    return value in patterns or (m["port"] is not None and f"{m['base']}:*" in patterns)


def _host_of(value: str) -> str | None:
    host = urlsplit(value if "//" in value else f"//{value}").hostname
    return host or None


def local_names(config: Config) -> list[str]:
    """The ``base_url`` host, the listen host when it is a concrete address, and the
    loopback names when listening on loopback (IPv6 literals bracketed)."""
    hosts: list[str] = []
    listen = config.host.strip("[]").lower()
    for host in (_host_of(config.base_url), listen):
        if host and host not in ("0.0.0.0", "::") and host not in hosts:
            hosts.append(host)
    if listen in LOOPBACK:
        hosts += [h for h in LOOPBACK if h not in hosts]
    return [f"[{h}]" if ":" in h else h for h in hosts]


#: The settings a plugin section may extend this service's own names with.
EXTRA_KEYS = ("allowed_hosts", "allowed_origins")


def configured(section: Mapping[str, Any], where: str, key: str) -> list[str]:
    """A plugin section's extra ``allowed_hosts`` / ``allowed_origins``, refused naming the
    entry when one could never match (``where`` names the section, ``plugins.mcp``, or is
    empty for a key relative to it: ``allowed_hosts[0]: ...``)."""
    grammar, form = (
        (HOST_PATTERN, "host[:port] or host:*")
        if key == "allowed_hosts"
        else (ORIGIN_PATTERN, "scheme://host[:port] or scheme://host:*")
    )
    values = [str(v) for v in section.get(key, [])]
    for i, value in enumerate(values):
        if not grammar.fullmatch(value):
            entry = f"{where}.{key}[{i}]" if where else f"{key}[{i}]"
            raise ConfigError(f"{entry}: {value!r} can never match; give {form}")
    return values


def check_extras(section: Mapping[str, Any]) -> None:
    """A plugin's section, checked when the config is loaded (from a registration hook
    given it): every extra host and origin could match, or a ``ConfigError`` names the
    entry relative to the section (``allowed_hosts[0]: ...``), which the host tells as
    from the config file."""
    for key in EXTRA_KEYS:
        configured(section, "", key)


def allowed_hosts(config: Config, section: Mapping[str, Any], where: str) -> list[str]:
    """Every Host value this service answers to: its own names (any port, since
    ``serve --port`` may override the configured one) plus the section's extras."""
    return [p for n in local_names(config) for p in (n, f"{n}:*")] + configured(
        section, where, "allowed_hosts"
    )


def allowed_origins(config: Config, section: Mapping[str, Any], where: str) -> list[str]:
    """Every Origin a browser on this service's own pages sends, plus the section's extras."""
    own = [
        p
        for n in local_names(config)
        for scheme in ("http", "https")
        for p in (f"{scheme}://{n}", f"{scheme}://{n}:*")
    ]
    return own + configured(section, where, "allowed_origins")
