"""DNS-rebinding protection on /mcp: Host and Origin match the allowed values exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from switchboard_mcp import hosts

from switchboard.config import load_config
from switchboard.errors import ConfigError

ACCEPT = "application/json, text/event-stream"
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}

LOOPBACK_HOSTS = ["127.0.0.1", "127.0.0.1:*", "localhost", "localhost:*", "[::1]", "[::1]:*"]
LOOPBACK_ORIGINS = [f"{scheme}://{h}" for scheme in ("http", "https") for h in LOOPBACK_HOSTS]


def hostile_hosts(port: int) -> list[str]:
    return [
        f"127.0.0.1:{port}@evil.com",  # the report's
        "127.0.0.1:8080@evil.com",
        "127.0.0.1.evil.com",
        f"127.0.0.1.evil.com:{port}",
        "localhost:80evil",
        "localhost:",
        f"localhost:{port}:{port}",
        f"localhost:{port}/path",
        "localhost:123456",
        "[::1]:x",
        f"[::1]:{port}@evil.com",
        f"LOCALHOST:{port}",
        "evil.com",
        f"evil.com:{port}",
    ]


def hostile_origins(port: int) -> list[str]:
    return [
        f"http://127.0.0.1:{port}.evil.com",  # the report's
        f"http://127.0.0.1:{port}@evil.com",
        "http://localhost:1234/path",
        f"http://localhost:{port}/",
        "http://localhost:80evil",
        "http://[::1]:x",
        "null",
        "http://evil.com",
        f"HTTP://localhost:{port}",
        f"http://LOCALHOST:{port}",
        f"ftp://localhost:{port}",
        f"localhost:{port}",
    ]


def legit_hosts(port: int) -> list[str]:
    return [f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "localhost", "127.0.0.1:80"]


def legit_origins(port: int) -> list[str]:
    return [
        f"http://127.0.0.1:{port}",
        f"http://localhost:{port}",
        f"http://[::1]:{port}",
        f"https://localhost:{port}",
        "http://localhost",
    ]


@pytest.mark.parametrize("value", hostile_hosts(18082))
def test_hostile_host_values_never_match(value: str) -> None:
    assert not hosts.allowed(value, LOOPBACK_HOSTS, hosts.HOST)


@pytest.mark.parametrize("value", legit_hosts(18082))
def test_loopback_host_values_match(value: str) -> None:
    assert hosts.allowed(value, LOOPBACK_HOSTS, hosts.HOST)


@pytest.mark.parametrize("value", hostile_origins(18082))
def test_hostile_origin_values_never_match(value: str) -> None:
    assert not hosts.allowed(value, LOOPBACK_ORIGINS, hosts.ORIGIN)


@pytest.mark.parametrize("value", legit_origins(18082))
def test_loopback_origin_values_match(value: str) -> None:
    assert hosts.allowed(value, LOOPBACK_ORIGINS, hosts.ORIGIN)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("allowed_hosts", "*.example.com"),
        ("allowed_hosts", "example.com/"),
        ("allowed_origins", "null"),
        ("allowed_origins", "https://example.com/"),
    ],
)
def test_a_configured_value_that_can_never_match_stops_start_up(
    tmp_path: Path, key: str, value: str
) -> None:
    path = tmp_path / "sb.toml"
    path.write_text(f'[plugins.mcp]\n{key} = ["{value}"]\n')
    with pytest.raises(ConfigError, match=key):
        hosts.transport_security(load_config(path, env={}))


def test_configured_extras_match_exactly(tmp_path: Path) -> None:
    path = tmp_path / "sb.toml"
    path.write_text(
        '[plugins.mcp]\nallowed_hosts = ["mcp.example.com:*"]\n'
        'allowed_origins = ["https://app.example.com"]\n'
    )
    settings = hosts.transport_security(load_config(path, env={}))
    assert hosts.refusal(settings, ["mcp.example.com:443"], ["https://app.example.com"]) is None
    assert hosts.refusal(settings, ["mcp.example.com:443.evil"], []) == hosts.BAD_HOST
    assert hosts.refusal(settings, ["mcp.example.com"], []) == hosts.BAD_HOST
    assert (
        hosts.refusal(settings, ["localhost:1"], ["https://app.example.com:1"]) == hosts.BAD_ORIGIN
    )
    # One Host, at most one Origin: a repeated header is refused, never picked from.
    assert hosts.refusal(settings, ["localhost:1", "evil.com"], []) == hosts.BAD_HOST
    assert hosts.refusal(settings, [], []) == hosts.BAD_HOST
    origins = ["https://app.example.com", "https://evil.com"]
    assert hosts.refusal(settings, ["localhost:1"], origins) == hosts.BAD_ORIGIN


async def _post(
    http: httpx.AsyncClient,
    url: str,
    token: str,
    *,
    host: str | None = None,
    origin: str | None = None,
) -> int:
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": ACCEPT,
        "MCP-Protocol-Version": "2025-06-18",
    }
    if host is not None:
        headers["Host"] = host
    if origin is not None:
        headers["Origin"] = origin
    async with http.stream("POST", url, json=INIT, headers=headers) as resp:
        await resp.aread()
        return resp.status_code


async def test_hostile_hosts_are_refused_over_http(people: Any) -> None:
    ep = await people.vend(people.alice, "hosts")
    port = people.srv.port
    async with httpx.AsyncClient(timeout=10) as http:
        got = {h: await _post(http, people.url, ep["token"], host=h) for h in hostile_hosts(port)}
        assert got == dict.fromkeys(hostile_hosts(port), 421)
        got = {h: await _post(http, people.url, ep["token"], host=h) for h in legit_hosts(port)}
        assert got == dict.fromkeys(legit_hosts(port), 200)
        # Refused before the bearer check: a hostile Host learns nothing about tokens.
        resp = await http.post(
            people.url, json=INIT, headers={"Host": f"127.0.0.1:{port}@evil.com", "Accept": ACCEPT}
        )
        assert (resp.status_code, resp.text) == (421, "Invalid Host header")
        # RFC 9110's reason phrase (Sanic has none for 421: its status line said UNKNOWN)
        assert resp.reason_phrase == "Misdirected Request"


async def test_hostile_origins_are_refused_over_http(people: Any) -> None:
    ep = await people.vend(people.alice, "origins")
    port = people.srv.port
    async with httpx.AsyncClient(timeout=10) as http:
        got = {
            o: await _post(http, people.url, ep["token"], origin=o) for o in hostile_origins(port)
        }
        assert got == dict.fromkeys(hostile_origins(port), 403)
        got = {o: await _post(http, people.url, ep["token"], origin=o) for o in legit_origins(port)}
        assert got == dict.fromkeys(legit_origins(port), 200)
        assert await _post(http, people.url, ep["token"]) == 200  # no Origin: not a browser
