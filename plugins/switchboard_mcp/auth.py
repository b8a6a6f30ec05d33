"""Endpoint bearer tokens for MCP: the SDK token verifier, caller resolvers, host checks."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.context import ServerRequestContext
from mcp.server.transport_security import TransportSecuritySettings

from switchboard.errors import Forbidden
from switchboard.runtime import Runtime
from switchboard.service.common import jsonable
from switchboard.service.identity import authenticate

from .server import CallerResolver

LOOPBACK = ("127.0.0.1", "localhost", "::1")


class EndpointTokenVerifier:
    """Verifies ``Authorization: Bearer <endpoint token>`` on every HTTP request.

    A revoked, expired or unknown token yields None, which the SDK's bearer middleware
    answers with 401, a JSON error and ``WWW-Authenticate: Bearer`` before any tool runs.
    The live endpoint row rides along in the access token's claims.
    """

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            row = await authenticate(self.rt, token)
        except Forbidden:
            return None
        expires = row.get("expires_at")
        return AccessToken(
            token=token,
            client_id=str(row["id"]),
            scopes=list(row.get("verbs") or []),
            expires_at=int(expires.timestamp()) if expires is not None else None,
            claims={"endpoint": dict(jsonable(row))},
        )


async def http_caller(ctx: ServerRequestContext[Any, Any]) -> dict[str, Any] | None:
    """The endpoint the bearer middleware authenticated for this HTTP request."""
    scope = getattr(ctx.request, "scope", None)
    user = scope.get("user") if isinstance(scope, dict) else None
    access = user.access_token if isinstance(user, AuthenticatedUser) else get_access_token()
    endpoint = (access.claims or {}).get("endpoint") if access is not None else None
    return endpoint if isinstance(endpoint, dict) else None


def token_caller(rt: Runtime, token: str) -> CallerResolver:
    """For stdio: re-check one token on every request, so revocation takes effect mid-session."""

    async def resolve(ctx: ServerRequestContext[Any, Any]) -> dict[str, Any] | None:
        try:
            row = await authenticate(rt, token)
        except Forbidden:
            return None
        return dict(jsonable(row))  # the same shape the HTTP path carries in its claims

    return resolve


def _host_of(value: str) -> str | None:
    host = urlsplit(value if "//" in value else f"//{value}").hostname
    return host or None


def transport_security(rt: Runtime) -> TransportSecuritySettings:
    """DNS-rebinding protection for the configured address.

    Allowed: the ``base_url`` host, the listen host when it is a concrete address, and
    the loopback names when listening on loopback (any port, since ``serve --port``
    may override the configured one). ``[plugins.mcp]`` may add hosts and origins, or
    turn the check off for a proxy that rewrites ``Host``.
    """
    cfg = rt.config.plugin("mcp")
    hosts: list[str] = []
    listen = rt.config.host.strip("[]")
    for host in (_host_of(rt.config.base_url), listen):
        if host and host not in ("0.0.0.0", "::") and host not in hosts:
            hosts.append(host)
    if listen in LOOPBACK:
        hosts += [h for h in LOOPBACK if h not in hosts]
    names = [f"[{h}]" if ":" in h else h for h in hosts]
    allowed_hosts = [p for n in names for p in (n, f"{n}:*")]
    allowed_origins = [
        p for n in names for scheme in ("http", "https") for p in (f"{scheme}://{n}",
                                                                   f"{scheme}://{n}:*")
    ]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=bool(cfg.get("dns_rebinding_protection", True)),
        allowed_hosts=allowed_hosts + list(cfg.get("allowed_hosts", [])),
        allowed_origins=allowed_origins + list(cfg.get("allowed_origins", [])),
    )
