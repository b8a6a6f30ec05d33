"""The operator CLI: humans, friendships, endpoints; JSON out, one-line errors."""

from __future__ import annotations

import psycopg
import pytest
from sbtest import CLI

from switchboard.secrets_box import hash_token


def test_vend_list_revoke(cli: CLI, dsn: str) -> None:
    cli.json("human", "add", "alice")
    vended = cli.json(
        "endpoint",
        "vend",
        "--owner",
        "alice",
        "--name",
        "pool-m",
        "--queues",
        "handoff,inbox",
        "--webhook-queues",
        "inbox",
        "--source-types",
        "cairn",
        "generic",
        "--webhook-max",
        "3",
    )
    assert set(vended) == {"endpoint_id", "token", "mcp_url"}
    assert vended["mcp_url"].endswith("/mcp")
    token = vended["token"]

    listing = cli.run("endpoint", "list").stdout
    assert token not in listing and hash_token(token) not in listing
    import json

    [ep] = json.loads(listing)
    assert ep["endpoint_id"] == vended["endpoint_id"]
    assert ep["scope_queues"] == ["handoff", "inbox"]
    assert ep["webhook_source_types"] == ["cairn", "generic"]
    assert ep["webhook_max"] == 3 and ep["state"] == "active"

    with psycopg.connect(dsn) as conn:
        stored = conn.execute("SELECT token_hash FROM endpoints").fetchone()
        assert stored == (hash_token(token),)

    assert cli.json("endpoint", "revoke", vended["endpoint_id"])["state"] == "revoked"
    [ep] = cli.json("endpoint", "list")
    assert ep["state"] == "revoked" and ep["revoked_at"]


def test_friend_add_is_directed(cli: CLI, dsn: str) -> None:
    cli.json("human", "add", "alice")
    cli.json("human", "add", "bob")
    assert cli.json("friend", "add", "alice", "bob") == {
        "from": "alice",
        "to": "bob",
        "state": "approved",
    }
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT a.name, b.name, f.state FROM friendships f JOIN humans a ON a.id = from_human"
            " JOIN humans b ON b.id = to_human"
        ).fetchall()
    assert rows == [("alice", "bob", "approved")]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("endpoint", "vend", "--owner", "nobody", "--name", "x"), "not found"),
        (
            ("endpoint", "vend", "--owner", "alice", "--name", "x", "--source-types", "ftp"),
            "source_types",
        ),
        (
            ("endpoint", "vend", "--owner", "alice", "--name", "x", "--queues", "bad queue!"),
            "queues",
        ),
        (("endpoint", "revoke", "00000000-0000-0000-0000-000000000000"), "not found"),
        (("human", "add", "alice"), "already exists"),
    ],
)
def test_errors_are_one_line_and_nonzero(cli: CLI, args: tuple[str, ...], needle: str) -> None:
    cli.fast().json("human", "add", "alice")
    proc = cli.run(*args, check=False)
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert proc.stdout == ""
