"""What every console route checks first: a Host and Origin that name this service, and a
database outage answered as a page (503), never a traceback."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from switchboard import hostcheck
from switchboard.config import Config
from switchboard.errors import RETRY_AFTER_SECONDS, StoreUnavailable

if TYPE_CHECKING:
    # types only: the config schema hook imports this module, and a command other than
    # serve must not import Sanic
    from sanic import HTTPResponse, Request

Handler = Callable[..., Awaitable["HTTPResponse"]]
Render = Callable[..., "HTTPResponse"]

#: ``[plugins.console]``: hosts and origins besides this service's own (a proxy's name).
CONFIG_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "allowed_hosts": {
            "type": "array",
            "items": {"type": "string"},
            "description": "extra Host values (host[:port] or host:*) the console answers to",
        },
        "allowed_origins": {
            "type": "array",
            "items": {"type": "string"},
            "description": "extra Origin values (scheme://host[:port]) its forms may post from",
        },
    },
}


class Guard:
    """The console's Host and Origin allowlists (the service's own names, as for ``/mcp``,
    plus ``[plugins.console]`` extras), and the wrapper every route goes through."""

    def __init__(self, config: Config) -> None:
        section = config.plugin("console")
        self.hosts = hostcheck.allowed_hosts(config, section, "plugins.console")
        self.origins = hostcheck.allowed_origins(config, section, "plugins.console")

    def host_ok(self, request: Request) -> bool:
        hosts = request.headers.getall("host", [])
        return len(hosts) == 1 and hostcheck.allowed(hosts[0], self.hosts, hostcheck.HOST)

    def origin_ok(self, request: Request) -> bool:
        """An absent Origin passes (the CSRF token still has to match); a present one must
        be this service's, never merely equal to whatever Host the request claims."""
        origins = request.headers.getall("origin", [])
        if not origins:
            return True
        return len(origins) == 1 and hostcheck.allowed(origins[0], self.origins, hostcheck.ORIGIN)

    def wrap(self, fn: Handler, render: Render) -> Handler:
        @functools.wraps(fn)
        async def handler(request: Request, **kw: Any) -> HTTPResponse:
            if not self.host_ok(request):
                return render(
                    request,
                    "error.html",
                    421,
                    signed_in=False,
                    title="Misdirected request",
                    message="This console does not answer to that host name.",
                )
            try:
                return await fn(request, **kw)
            except StoreUnavailable:
                resp = render(
                    request,
                    "error.html",
                    503,
                    signed_in=False,
                    title="Unavailable",
                    message="The database is not answering; try again in a few seconds.",
                )
                resp.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
                return resp

        return handler
