"""Endpoint bearer tokens for MCP: the SDK token verifier and the caller resolvers."""

from __future__ import annotations

from typing import Any

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.context import ServerRequestContext

from switchboard.errors import Forbidden
from switchboard.runtime import Runtime
from switchboard.service.common import jsonable
from switchboard.service.identity import authenticate

from .server import CallerResolver


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
