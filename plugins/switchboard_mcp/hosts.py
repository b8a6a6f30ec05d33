"""DNS-rebinding protection for ``/mcp``: the allowed Host and Origin values, matched exactly."""

from __future__ import annotations

from collections.abc import Sequence

from mcp.server.transport_security import TransportSecuritySettings

from switchboard import hostcheck
from switchboard.config import Config

# The grammar and the allowlist are the host's (switchboard/hostcheck.py), shared with the
# console; re-exported under the names this module has always had.
LOOPBACK = hostcheck.LOOPBACK
HOST = hostcheck.HOST
ORIGIN = hostcheck.ORIGIN
allowed = hostcheck.allowed

#: What the SDK answers for a refused header; the bridge keeps its statuses and bodies.
BAD_HOST = (421, "Invalid Host header")
BAD_ORIGIN = (403, "Invalid Origin header")


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


def transport_security(config: Config) -> TransportSecuritySettings:
    """DNS-rebinding protection for the configured address.

    Allowed: the ``base_url`` host, the listen host when it is a concrete address, and
    the loopback names when listening on loopback (any port, since ``serve --port``
    may override the configured one). ``[plugins.mcp]`` may add hosts and origins, or
    turn the check off for a proxy that rewrites ``Host``.
    """
    cfg = config.plugin("mcp")
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=bool(cfg.get("dns_rebinding_protection", True)),
        allowed_hosts=hostcheck.allowed_hosts(config, cfg, "plugins.mcp"),
        allowed_origins=hostcheck.allowed_origins(config, cfg, "plugins.mcp"),
    )
