"""MCP fixtures: a real server, a small world built by the CLI, and bearer-token sessions."""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from sbmcp import agent
from sbpg import drop_database
from sbtest import CLI, Server, free_port, make_env, remember_secrets
from sbworld import World

from switchboard.config import load_config
from switchboard.runtime import Runtime
from switchboard.service import identity

_counter = itertools.count()


@pytest.fixture(scope="module")
def mcp_server(
    pg_server: Any, template_db: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """One real ``switchboard serve`` per test module, on its own database."""
    name = f"sb_mcp{os.getpid()}_{next(_counter)}"
    with psycopg.connect(pg_server.get_uri(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {template_db}")
    tmp = tmp_path_factory.mktemp("mcp")
    env = make_env(pg_server.get_uri(name), tmp / "data")
    port = free_port()
    env["SWITCHBOARD_BASE_URL"] = f"http://127.0.0.1:{port}"
    srv = Server(env, port, tmp / "server.log").start()
    yield srv
    srv.stop()
    drop_database(pg_server.get_uri(), name)


@dataclass
class People:
    """A test's own two humans on the module's server (names unique per test).

    ``vend`` makes endpoints in-process through the same service the CLI calls (the CLI
    costs a second per call); ``w`` is the real CLI for the walkthrough.
    """

    srv: Server
    w: World
    rt: Runtime
    alice: str
    bob: str

    @property
    def url(self) -> str:
        return self.srv.base_url + "/mcp"

    async def vend(
        self,
        owner: str,
        name: str,
        *,
        queues: str = "inbox",
        webhook_queues: str = "inbox",
        sources: str = "cairn,gitea,github,generic",
        webhook_max: int = 5,
        verbs: str | None = None,
        expires_in: int | None = None,
    ) -> dict[str, Any]:
        endpoint = await identity.vend_endpoint(
            self.rt,
            owner=owner,
            name=name,
            queues=_csv(queues),
            webhook_queues=_csv(webhook_queues),
            source_types=_csv(sources),
            webhook_max=webhook_max,
            verbs=_csv(verbs) if verbs is not None else None,
            expires_in_seconds=expires_in,
        )
        remember_secrets(endpoint)
        return endpoint


def _csv(value: str) -> list[str]:
    return [v for v in value.split(",") if v]


@pytest.fixture
async def people(mcp_server: Server) -> AsyncIterator[People]:
    n = next(_counter)
    rt = Runtime(load_config(env=mcp_server.env))
    await rt.open_store(migrate=False)
    try:
        p = People(mcp_server, World(CLI(mcp_server.env)), rt, f"alice{n}", f"bob{n}")
        await identity.add_human(rt, p.alice)
        await identity.add_human(rt, p.bob)
        yield p
    finally:
        await rt.shutdown()


@pytest.fixture
def connect() -> Any:
    """``async with connect(url, token) as agent``: a bearer-token MCP session."""
    return agent
