"""The ``retry`` verb over MCP (owner-checked) and the CLI's ``todos retry``: one round trip each."""

from __future__ import annotations

from typing import Any

import psycopg
from sbtest import CLI

from switchboard.service import identity


def _todo(dsn: str, endpoint_id: str, key: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "INSERT INTO todos (endpoint_id, queue, idempotency_key, title, state, attempts)"
            " VALUES (%s, 'inbox', %s, 't', 'dead', 5) RETURNING id",
            (endpoint_id, key),
        ).fetchone()
    assert row is not None
    return str(row[0])


async def test_retry_over_mcp_and_cli(people: Any, connect: Any) -> None:
    """One real round trip per surface: the MCP tool (owner-checked) and the CLI verb."""
    ep = await people.vend(people.alice, "retrier", queues="inbox")
    other = await people.vend(people.bob, "stranger", queues="inbox")
    me = await identity.authenticate(people.rt, ep["token"])
    dsn = people.srv.env["SWITCHBOARD_DATABASE_URL"]
    first, second = _todo(dsn, me["id"], "a"), _todo(dsn, me["id"], "b")
    async with connect(people.url, ep["token"]) as a, connect(people.url, other["token"]) as b:
        assert "retry" in await a.tool_names()
        assert (await b.fails("retry", id=first)).code == "not_found"
        got = await a.call("retry", id=first)
        assert got["todo"]["id"] == first and got["todo"]["state"] == "pending"
        failed = await a.fails("retry", id=first)
        assert failed.code == "conflict" and "pending" in failed.text
        claimed = await a.call("claim", id=first)
        assert claimed["todo"]["attempts"] == 1

    cli: CLI = people.w.cli
    doc = cli.json("todos", "retry", second)
    assert doc["todo"]["id"] == second and doc["todo"]["state"] == "pending"
    proc = cli.run("todos", "retry", second, check=False)
    assert proc.returncode == 1 and "conflict" in proc.stderr and "pending" in proc.stderr
