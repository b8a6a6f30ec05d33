"""One live endpoint per name per human: a second vend of a name is ``conflict``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from switchboard.errors import Conflict, mcp_code
from switchboard.runtime import Runtime
from switchboard.service import identity


async def _vend(rt: Runtime, owner: str, name: str, **kw: Any) -> dict[str, Any]:
    return await identity.vend_endpoint(rt, owner=owner, name=name, queues=["inbox"], **kw)


async def test_a_live_name_is_refused_per_human(runtime: Runtime) -> None:
    for human in ("alice", "bob"):
        await identity.add_human(runtime, human)
    first = await _vend(runtime, "alice", "agent")
    with pytest.raises(Conflict) as refused:
        await _vend(runtime, "alice", "agent")
    assert mcp_code(refused.value) == "conflict"
    assert "'agent'" in str(refused.value) and first["endpoint_id"] in str(refused.value)
    assert refused.value.details == {"endpoint_id": first["endpoint_id"]}
    await _vend(runtime, "bob", "agent")  # another human's names are their own
    await _vend(runtime, "alice", "Agent")  # names compare exactly
    # A revoked endpoint's name may be vended again (scope is fixed: re-vend is the fix).
    await identity.revoke_endpoint(runtime, first["endpoint_id"])
    second = await _vend(runtime, "alice", "agent")
    # So may an expired one's.
    await _vend(runtime, "alice", "brief", expires_in_seconds=1)
    await asyncio.sleep(1.1)
    await _vend(runtime, "alice", "brief")
    names = [(e["owner_name"], e["name"]) for e in await identity.list_endpoints(runtime)]
    assert names.count(("alice", "agent")) == 2 and names.count(("bob", "agent")) == 1
    assert second["endpoint_id"] != first["endpoint_id"]


async def test_concurrent_vends_of_one_name_make_exactly_one(runtime: Runtime) -> None:
    await identity.add_human(runtime, "alice")
    outcomes = await asyncio.gather(
        *(_vend(runtime, "alice", "racer") for _ in range(8)), return_exceptions=True
    )
    made = [o for o in outcomes if isinstance(o, dict)]
    assert len(made) == 1, outcomes
    assert all(isinstance(o, Conflict) for o in outcomes if not isinstance(o, dict))


async def test_duplicates_an_older_database_holds_stay_and_block_a_third(
    runtime: Runtime,
) -> None:
    # Before the check, duplicates were accepted: no migration rewrites or fails on them.
    await identity.add_human(runtime, "alice")
    made = await _vend(runtime, "alice", "twin")
    async with runtime.store.db.tx() as conn:
        await conn.execute(
            "INSERT INTO endpoints (owner_human, name, token_hash)"
            " SELECT owner_human, name, 'old-duplicate' FROM endpoints WHERE id = %s",
            (made["endpoint_id"],),
        )
    listed = [e for e in await identity.list_endpoints(runtime) if e["name"] == "twin"]
    assert len(listed) == 2
    with pytest.raises(Conflict):
        await _vend(runtime, "alice", "twin")


def test_the_cli_refuses_a_duplicate_on_stderr(cli: Any) -> None:
    cli.run("human", "add", "carol")
    cli.run("endpoint", "vend", "--owner", "carol", "--name", "agent", "--queues", "inbox")
    proc = cli.run(
        "endpoint", "vend", "--owner", "carol", "--name", "agent", "--queues", "inbox", check=False
    )
    assert proc.returncode != 0 and proc.stdout == ""
    assert (
        proc.stderr.startswith("switchboard: error: conflict: name: ") and "'agent'" in proc.stderr
    )
