"""Revocation under load: once the revoking call returned, no delivery sent after it uses
the revoked route, endpoint, webhook or token, however many deliveries share a resolution.

Deliveries stream over real HTTP into a real two-worker ``switchboard serve`` (each worker
resolving tokens in batches) while the real CLI revokes; every request's send time is
noted before it is sent, and everything sent after the CLI returned is checked in its
202 body and again in the database.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from sbtest import CLI, Server
from sbworld import World

pytestmark = pytest.mark.slow  # ~35 s of streaming deliveries

CONCURRENCY = 24
#: How long deliveries stream before the revoking call and after it returned (at least),
#: and how many each side must have sent (however long that takes, up to STREAM_MAX_S).
BEFORE, AFTER = 0.6, 1.2
ENOUGH = 50
STREAM_MAX_S = 120.0

_tenant = itertools.count()


@pytest.fixture(scope="module")
def server(module_server_factory: Any, module_dsn: str) -> Server:
    srv: Server = module_server_factory(module_dsn, "--workers", "2")
    return srv


@pytest.fixture
def world(server: Server) -> World:
    """alice's webhook-owning ``owner`` and her friend bob's ``target``, a tenant per test."""
    w = World(CLI(server.env), prefix=f"rv{next(_tenant)}-", direct=True)
    w.human("alice")
    w.human("bob")
    w.endpoint("alice", "owner")
    w.endpoint("bob", "target")
    w.friend("alice", "bob")
    return w


@dataclass
class Sent:
    delivery_id: str
    at: float  # monotonic, noted before the request was handed to the client
    status: int = 0
    endpoints: list[str] = field(default_factory=list)


@dataclass
class Run:
    sent: list[Sent]
    revoked_at: float  # when the revoking call returned
    answer: Any  # what it printed

    @property
    def after(self) -> list[Sent]:
        return [s for s in self.sent if s.at > self.revoked_at]

    @property
    def before(self) -> list[Sent]:
        return [s for s in self.sent if s.at < self.revoked_at]


async def _until(done: Callable[[], bool], at_least: float) -> None:
    """Wait ``at_least`` seconds, then on until ``done()`` (bounded by STREAM_MAX_S)."""
    await asyncio.sleep(at_least)
    async with asyncio.timeout(STREAM_MAX_S):
        while not done():
            await asyncio.sleep(0.05)


async def _stream_while(url: str, revoke: Callable[[], Any]) -> Run:
    """POST unique deliveries at CONCURRENCY until AFTER seconds past ``revoke()``'s return."""
    sent: list[Sent] = []
    stop = asyncio.Event()

    async def producer(client: httpx.AsyncClient) -> None:
        while not stop.is_set():
            s = Sent(str(uuid.uuid4()), time.monotonic())
            sent.append(s)
            resp = await client.post(
                url, content=b'{"n": 1}', headers={"X-Delivery-Id": s.delivery_id}
            )
            s.status = resp.status_code
            if resp.status_code == 202:
                s.endpoints = [t["endpoint_id"] for t in resp.json()["todos"]]

    limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:
        producers = [asyncio.create_task(producer(client)) for _ in range(CONCURRENCY)]
        # Counted, not timed: on a loaded machine 1.2 s may carry only a couple dozen
        # deliveries, so each side streams for its time *and* until it has its 50.
        await _until(lambda: len(sent) >= ENOUGH, BEFORE)
        answer = await asyncio.to_thread(revoke)
        revoked_at = time.monotonic()
        await _until(lambda: sum(s.at > revoked_at for s in sent) >= ENOUGH, AFTER)
        stop.set()
        await asyncio.gather(*producers)
    run = Run(sent, revoked_at, answer)
    assert len(run.before) >= ENOUGH and len(run.after) >= ENOUGH, (len(run.before), len(run.after))
    return run


def _rows(dsn: str, sql: str, *args: Any) -> list[Any]:
    with psycopg.connect(dsn) as conn:
        return [r[0] for r in conn.execute(sql, args).fetchall()]


def _delivered_to(dsn: str, hook: dict[str, Any], endpoint_id: str) -> set[str]:
    """The delivery ids of this webhook's todos for ``endpoint_id``, from the database."""
    prefix = f"{hook['webhook_id']}:"
    ids = _rows(
        dsn,
        "SELECT e.external_id FROM todos t JOIN events e ON e.id = t.event_id"
        " WHERE t.endpoint_id = %s AND e.external_id LIKE %s",
        endpoint_id,
        prefix + "%",
    )
    return {i.removeprefix(prefix) for i in ids}


def _assert_target_cut_off(run: Run, dsn: str, hook: dict[str, Any], w: World) -> None:
    owner = w.endpoints["owner"]["endpoint_id"]
    target = w.endpoints["target"]["endpoint_id"]
    # Before the call the route was live: the target got todos (the test saw the change).
    assert any(target in s.endpoints for s in run.before)
    # After it returned: every delivery still lands for the owner, none for the target.
    assert {s.status for s in run.after} == {202}
    assert all(s.endpoints == [owner] for s in run.after)
    # The database agrees: none of the target's todos came from a delivery sent after.
    in_db = _delivered_to(dsn, hook, target)
    assert in_db and not in_db & {s.delivery_id for s in run.after}
    assert _delivered_to(dsn, hook, owner) >= {s.delivery_id for s in run.after}


async def test_a_removed_route_gets_nothing_sent_after_the_removal(
    world: World, module_dsn: str
) -> None:
    hook = world.webhook("owner", "generic")
    world.route(hook["webhook_id"], "target")
    run = await _stream_while(
        hook["ingest_url"],
        lambda: world.cli.json(
            "webhook",
            "route",
            "remove",
            hook["webhook_id"],
            world.endpoints["target"]["endpoint_id"],
        ),
    )
    _assert_target_cut_off(run, module_dsn, hook, world)


async def test_a_revoked_target_endpoint_gets_nothing_sent_after_the_revocation(
    world: World, module_dsn: str
) -> None:
    hook = world.webhook("owner", "generic")
    world.route(hook["webhook_id"], "target")
    run = await _stream_while(
        hook["ingest_url"],
        lambda: world.cli.json("endpoint", "revoke", world.endpoints["target"]["endpoint_id"]),
    )
    _assert_target_cut_off(run, module_dsn, hook, world)


async def test_a_revoked_friendship_cuts_the_route_off(world: World, module_dsn: str) -> None:
    hook = world.webhook("owner", "generic")
    world.route(hook["webhook_id"], "target")
    run = await _stream_while(
        hook["ingest_url"], lambda: world.friend("alice", "bob", state="revoked")
    )
    _assert_target_cut_off(run, module_dsn, hook, world)


async def test_a_deleted_webhook_answers_404_to_everything_sent_after(
    world: World, module_dsn: str
) -> None:
    hook = world.webhook("owner", "generic")
    run = await _stream_while(
        hook["ingest_url"], lambda: world.cli.json("webhook", "delete", hook["webhook_id"])
    )
    # Before: 202s, or 404 for one in flight that resolved its token just before the
    # delete committed and wrote just after (never a 500).
    assert 202 in {s.status for s in run.before}
    assert {s.status for s in run.before} <= {202, 404}
    assert {s.status for s in run.after} == {404}
    after = [f"{hook['webhook_id']}:{s.delivery_id}" for s in run.after]
    assert _rows(module_dsn, "SELECT count(*) FROM events WHERE external_id = ANY(%s)", after) == [
        0
    ]


async def test_a_token_rotated_without_overlap_answers_404_to_everything_sent_after(
    world: World, module_dsn: str, tmp_path: Path
) -> None:
    hook = world.webhook("owner", "generic")
    config = tmp_path / "no-overlap.toml"
    config.write_text("[ingest]\nrotation_overlap_hours = 0\n")
    rotating = CLI({**world.cli.env, "SWITCHBOARD_CONFIG": str(config)})
    run = await _stream_while(
        hook["ingest_url"], lambda: rotating.json("webhook", "rotate", hook["webhook_id"])
    )
    assert run.answer["previous_until"] is None
    assert {s.status for s in run.before} - {404} == {202}  # in flight: either
    assert {s.status for s in run.after} == {404}
    after = [f"{hook['webhook_id']}:{s.delivery_id}" for s in run.after]
    assert _rows(module_dsn, "SELECT count(*) FROM events WHERE external_id = ANY(%s)", after) == [
        0
    ]
    fresh = httpx.post(run.answer["ingest_url"], content=b"{}", timeout=30)
    assert fresh.status_code == 202, fresh.text
