"""What every console route checks first: a Host and Origin that name this service, its
form parsed quietly, and a database outage (503) or a defect of ours (500) answered as a
console page, never Sanic's or the API's."""

from __future__ import annotations

import functools
import ipaddress
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from switchboard import hostcheck
from switchboard.config import Config
from switchboard.errors import RETRY_AFTER_SECONDS, StoreUnavailable
from switchboard.plugin import ConfigError

from . import params

if TYPE_CHECKING:
    # types only: the config schema hook imports this module, and a command other than
    # serve must not import Sanic
    from sanic import HTTPResponse, Request

log = logging.getLogger(__name__)

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
        "trusted_proxies": {
            "type": "array",
            "items": {"type": "string"},
            "description": "addresses or CIDRs of reverse proxies whose X-Forwarded-Host and"
            " X-Forwarded-Proto name the console's public origin (default: none)",
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
        self.proxies = trusted_proxies(section.get("trusted_proxies", []))

    def host_ok(self, request: Request) -> bool:
        hosts = request.headers.getall("host", [])
        return len(hosts) == 1 and hostcheck.allowed(hosts[0], self.hosts, hostcheck.HOST)

    def origin_ok(self, request: Request) -> bool:
        """An absent Origin passes (the CSRF token still has to match); a present one must
        be this service's, never merely equal to whatever Host the request claims."""
        origins = request.headers.getall("origin", [])
        if not origins:
            return True
        if len(origins) != 1:
            return False
        if hostcheck.allowed(origins[0], self.origins, hostcheck.ORIGIN):
            return True
        forwarded = self.forwarded_origin(request)
        return forwarded is not None and _same_origin(origins[0], forwarded)

    def forwarded_origin(self, request: Request) -> str | None:
        """The public origin a trusted proxy names (``X-Forwarded-Proto://X-Forwarded-Host``);
        None when the peer is not a trusted proxy or the headers are absent or ambiguous."""
        if not self.proxies or not _peer_in(request.ip, self.proxies):
            return None
        hosts = request.headers.getall("x-forwarded-host", [])
        protos = request.headers.getall("x-forwarded-proto", [])
        if len(hosts) != 1 or len(protos) > 1:
            return None
        host = hosts[0].strip()
        proto = protos[0].strip().lower() if protos else request.scheme
        if proto not in ("http", "https") or not hostcheck.HOST.fullmatch(host):
            return None
        return f"{proto}://{host}"

    def wrap(self, fn: Handler, render: Render) -> Handler:
        from sanic.exceptions import SanicException  # serve only: it builds the routes

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
            if request.method == "POST":
                params.parse_form(request)  # before anything reads request.form
            try:
                return await fn(request, **kw)
            except SanicException:
                raise  # the application's own answer to its own exceptions
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
            except Exception:
                # a defect of ours: logged with its traceback, and still a console page
                log.exception("unexpected error on %s %s", request.method, request.path)
                return render(
                    request,
                    "error.html",
                    500,
                    signed_in=False,
                    title="Internal error",
                    message="Something went wrong on our side; it has been logged.",
                )

        return handler


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def check_config(section: dict[str, Any]) -> None:
    """``[plugins.console]``, checked when the config is loaded (not when a worker builds
    the routes): extra hosts and origins that could match, proxies that are addresses or
    CIDRs; a mistake is a ``ConfigError`` naming the entry relative to the section
    (``trusted_proxies[0]: ...``), which the host tells as from the config file."""
    hostcheck.check_extras(section)
    trusted_proxies(section.get("trusted_proxies", []), "trusted_proxies")


def trusted_proxies(values: Any, key: str = "plugins.console.trusted_proxies") -> list[Network]:
    """``[plugins.console] trusted_proxies``: each an address or a CIDR with no host bits
    set; anything else refused at start-up naming the entry (``key[i]``)."""
    out: list[Network] = []
    for i, value in enumerate(values):
        where = f"{key}[{i}]"
        if not isinstance(value, str):
            raise ConfigError(f"{where}: must be an address or a CIDR, as a string")
        try:
            out.append(ipaddress.ip_network(value.strip(), strict=True))
        except ValueError as exc:
            raise ConfigError(f"{where}: {value!r} is not an address or a CIDR ({exc})") from None
    return out


def _peer_in(ip: str, networks: list[Network]) -> bool:
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return False
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return any(addr in net for net in networks)


_DEFAULT_PORTS = {"http": "80", "https": "443"}


def _same_origin(a: str, b: str) -> bool:
    """Two origins equal once a scheme's default port is dropped (case-insensitively)."""

    def norm(value: str) -> str:
        value = value.lower()
        scheme = value.split("://", 1)[0]
        port = _DEFAULT_PORTS.get(scheme)
        return value[: -len(port) - 1] if port and value.endswith(f":{port}") else value

    return hostcheck.ORIGIN.fullmatch(a) is not None and norm(a) == norm(b)
