"""DNS-rebinding protection for ``/mcp``: the allowed Host and Origin values, matched exactly."""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from typing import Any
from urllib.parse import urlsplit

from mcp.server.transport_security import TransportSecuritySettings

from switchboard.config import Config
from switchboard.errors import ConfigError

LOOPBACK = ("127.0.0.1", "localhost", "::1")

# A host is a bracketed IPv6 literal or a plain name (ASCII letters, digits, dot, dash,
# underscore). The SDK's own matcher takes ``base:*`` as "starts with ``base:``", which lets
# ``127.0.0.1:80@evil.com`` and ``http://127.0.0.1:80.evil.com`` through; here a value must
# parse whole, and ``:*`` stands for a port of digits only.
_NAME = r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)"
_PORT = r"[0-9]{1,5}"
HOST = re.compile(rf"(?P<base>{_NAME})(?::(?P<port>{_PORT}))?")
ORIGIN = re.compile(rf"(?P<base>[a-z][a-z0-9+.-]*://{_NAME})(?::(?P<port>{_PORT}))?")
_HOST_PATTERN = re.compile(rf"{_NAME}(?::(?:{_PORT}|\*))?")
_ORIGIN_PATTERN = re.compile(rf"[a-z][a-z0-9+.-]*://{_NAME}(?::(?:{_PORT}|\*))?")

#: What the SDK answers for a refused header; the bridge keeps its statuses and bodies.
BAD_HOST = (421, "Invalid Host header")
BAD_ORIGIN = (403, "Invalid Origin header")


def allowed(value: str, patterns: Collection[str], grammar: re.Pattern[str]) -> bool:
    """Whether ``value`` parses whole and equals a pattern, or its base does with ``:*``."""
    m = grammar.fullmatch(value)
    if m is None:
        return False
    return value in patterns or (m["port"] is not None and f"{m['base']}:*" in patterns)


def refusal(
    settings: TransportSecuritySettings, hosts: Sequence[str], origins: Sequence[str]
) -> tuple[int, str] | None:
    """The status and text refusing a request's Host and Origin headers, or None to serve it.

    Exactly one Host is required; an Origin may be absent (same-origin and non-browser
    clients), but never repeated.
    """
    if not settings.enable_dns_rebinding_protection:
        return None
    if len(hosts) != 1 or not allowed(hosts[0], settings.allowed_hosts, HOST):
        return BAD_HOST
    if len(origins) > 1 or (origins and not allowed(origins[0], settings.allowed_origins, ORIGIN)):
        return BAD_ORIGIN
    return None


def _host_of(value: str) -> str | None:
    host = urlsplit(value if "//" in value else f"//{value}").hostname
    return host or None


def _configured(cfg: dict[str, Any], key: str, grammar: re.Pattern[str], form: str) -> list[str]:
    """``[plugins.mcp]`` extras, refused at start-up when they could never match."""
    values = [str(v) for v in cfg.get(key, [])]
    for value in values:
        if not grammar.fullmatch(value):
            raise ConfigError(f"plugins.mcp.{key}: {value!r} can never match; give {form}")
    return values


def transport_security(config: Config) -> TransportSecuritySettings:
    """DNS-rebinding protection for the configured address.

    Allowed: the ``base_url`` host, the listen host when it is a concrete address, and
    the loopback names when listening on loopback (any port, since ``serve --port``
    may override the configured one). ``[plugins.mcp]`` may add hosts and origins, or
    turn the check off for a proxy that rewrites ``Host``.
    """
    cfg = config.plugin("mcp")
    hosts: list[str] = []
    listen = config.host.strip("[]").lower()
    for host in (_host_of(config.base_url), listen):
        if host and host not in ("0.0.0.0", "::") and host not in hosts:
            hosts.append(host)
    if listen in LOOPBACK:
        hosts += [h for h in LOOPBACK if h not in hosts]
    names = [f"[{h}]" if ":" in h else h for h in hosts]
    allowed_hosts = [p for n in names for p in (n, f"{n}:*")]
    allowed_origins = [
        p
        for n in names
        for scheme in ("http", "https")
        for p in (f"{scheme}://{n}", f"{scheme}://{n}:*")
    ]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=bool(cfg.get("dns_rebinding_protection", True)),
        allowed_hosts=allowed_hosts
        + _configured(cfg, "allowed_hosts", _HOST_PATTERN, "host[:port] or host:*"),
        allowed_origins=allowed_origins
        + _configured(
            cfg, "allowed_origins", _ORIGIN_PATTERN, "scheme://host[:port] or scheme://host:*"
        ),
    )
