"""``switchboard --version``, ``human list``, ``friend list [HUMAN]`` and ``friend remove A B``."""

from __future__ import annotations

import subprocess

from sbtest import CLI, SWITCHBOARD

from switchboard import __version__
from switchboard.runtime import Runtime
from switchboard.service import identity, webhooks


def test_version_needs_no_config_nor_database(tmp_path: object) -> None:
    # A config that does not exist: the version is printed before the config is read.
    proc = subprocess.run(
        [*SWITCHBOARD, "--config", "/nonexistent.toml", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"switchboard {__version__}"


async def test_human_and_friend_verbs(cli: CLI, runtime: Runtime) -> None:
    rt = runtime
    for name in ("alice", "bob", "carol"):
        await identity.add_human(rt, name)
    router = await identity.vend_endpoint(
        rt,
        owner="alice",
        name="router",
        queues=["inbox"],
        webhook_queues=["inbox"],
        source_types=["generic"],
        webhook_max=2,
    )
    pool = await identity.vend_endpoint(rt, owner="bob", name="pool", queues=["inbox"])
    await identity.revoke_endpoint(
        rt,
        (await identity.vend_endpoint(rt, owner="bob", name="old", queues=["inbox"]))[
            "endpoint_id"
        ],
    )
    await identity.add_friend(rt, "alice", "bob")
    await identity.add_friend(rt, "carol", "alice", "pending")
    owner = await identity.authenticate(rt, router["token"])
    hook = await webhooks.create_webhook(rt, owner, "generic", "inbox")
    await webhooks.add_route(rt, owner, hook["webhook_id"], pool["endpoint_id"])

    # Each verb once through the installed script (real), its variations in process (cli).
    real, cli = cli, cli.fast()
    humans = real.json("human", "list")["humans"]
    assert [(h["name"], h["endpoints"], h["live_endpoints"]) for h in humans] == [
        ("alice", 1, 1),
        ("bob", 2, 1),
        ("carol", 0, 0),
    ]
    assert set(humans[0]) == {"human_id", "name", "endpoints", "live_endpoints", "created_at"}
    table = cli.run("human", "list", "--table").stdout
    assert "NAME" in table and "carol" in table and "{" not in table

    pairs = [(f["from"], f["to"], f["state"]) for f in real.json("friend", "list")["friendships"]]
    assert pairs == [("alice", "bob", "approved"), ("carol", "alice", "pending")]
    assert [(f["from"], f["to"]) for f in cli.json("friend", "list", "bob")["friendships"]] == [
        ("alice", "bob")
    ]
    unknown = cli.run("friend", "list", "nobody", check=False)
    assert unknown.returncode == 1 and "not_found" in unknown.stderr

    # Removing alice -> bob deletes the friendship and the route it authorized.
    removed = real.json("friend", "remove", "alice", "bob")
    assert removed == {
        "from": "alice",
        "to": "bob",
        "removed": True,
        "routes_removed": [
            {
                "webhook_id": hook["webhook_id"],
                "target_endpoint_id": pool["endpoint_id"],
                "target_name": "pool",
            }
        ],
    }
    assert (await webhooks.list_routes(rt, None, hook["webhook_id"]))["routes"] == []
    resolved = await rt.store.resolve_webhook_by_id(hook["webhook_id"])
    assert resolved is not None
    assert [t["id"] for t in resolved["targets"]] == [router["endpoint_id"]]
    assert [f["to"] for f in cli.json("friend", "list", "alice")["friendships"]] == ["alice"]
    again = cli.run("friend", "remove", "alice", "bob", check=False)
    assert again.returncode == 1 and "no friendship from 'alice' to 'bob'" in again.stderr


async def test_an_empty_name_in_a_list_flag_is_refused_not_dropped(
    cli: CLI, runtime: Runtime
) -> None:
    """``--queues "$UNSET"`` would otherwise vend an endpoint that drains nothing."""
    await identity.add_human(runtime, "alice")
    fast = cli.fast()
    vend = ("endpoint", "vend", "--owner", "alice", "--name", "x")
    for flag, value in (
        ("--queues", ""),
        ("--queues", "inbox,,triage"),
        ("--queues", "inbox,"),
        ("--webhook-queues", " "),
        ("--source-types", ""),
        ("--verbs", ""),
    ):
        proc = fast.run(*vend, flag, value, check=False)
        assert (proc.returncode, proc.stdout) == (2, ""), (flag, value, proc.stderr)
        assert proc.stderr.splitlines()[-1] == (
            f"switchboard endpoint vend: error: argument {flag}: an empty name in {value!r}:"
            " give names separated by commas or spaces"
        )
    assert await identity.list_endpoints(runtime) == []  # nothing was vended
    vended = fast.json(*vend, "--queues", "inbox, triage", "archive")
    assert vended["endpoint_id"]
    [shown] = await identity.list_endpoints(runtime)
    assert shown["scope_queues"] == ["inbox", "triage", "archive"]
