"""The issue's load test, smaller: concurrent deliveries over real HTTP, with duplicates."""

from __future__ import annotations

import asyncio
import random
import re
from collections import defaultdict
from typing import Any

import httpx
import psycopg
import pytest
from sbtest import CLI
from sbworld import World

DELIVERIES = 1500
CLIENTS = 32


def _load(total: int, dup_share: float, seed: int) -> list[str]:
    """Delivery ids in sending order: every id once, a share of them again, half of the
    repeats right behind the original (concurrent with it), half later."""
    rng = random.Random(seed)
    order = [f"d{i}" for i in range(total)]
    for i in rng.sample(range(total), int(total * dup_share)):
        at = order.index(f"d{i}") + 1 if rng.random() < 0.5 else rng.randrange(len(order) + 1)
        order.insert(max(at, order.index(f"d{i}") + 1), f"d{i}")
    return order


async def _send(url: str, ids: list[str]) -> list[tuple[str, int, dict[str, Any]]]:
    queue: asyncio.Queue[str] = asyncio.Queue()
    for i in ids:
        queue.put_nowait(i)
    answers: list[tuple[str, int, dict[str, Any]]] = []
    limits = httpx.Limits(max_connections=CLIENTS, max_keepalive_connections=CLIENTS)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:

        async def worker() -> None:
            while not queue.empty():
                did = queue.get_nowait()
                resp = await client.post(
                    url,
                    content=b'{"id": "%s"}' % did.encode(),
                    headers={"X-Delivery-Id": did, "Content-Type": "application/json"},
                )
                answers.append((did, resp.status_code, resp.json()))

        await asyncio.gather(*[worker() for _ in range(CLIENTS)])
    return answers


def _write_batches(metrics: str) -> tuple[float, float]:
    """(flushes, deliveries) of ``switchboard_store_batch_size{step="write"}``."""

    def sample(name: str) -> float:
        found = re.search(rf'^{name}\{{step="write"\}} (\S+)$', metrics, re.M)
        assert found, f"{name} missing from /metrics"
        return float(found[1])

    return (
        sample("switchboard_store_batch_size_count"),
        sample("switchboard_store_batch_size_sum"),
    )


@pytest.mark.slow
async def test_concurrent_load_with_duplicates_loses_nothing_and_duplicates_nothing(
    server_factory: Any, dsn: str
) -> None:
    srv = server_factory(dsn)
    w = World(CLI(srv.env), direct=True)
    w.human("alice")
    w.endpoint("alice", "owner")
    w.endpoint("alice", "second")
    hook = w.webhook("owner", "generic")
    w.route(hook["webhook_id"], "second")
    targets = [w.endpoints[n]["endpoint_id"] for n in ("owner", "second")]

    ids = _load(DELIVERIES, 0.10, seed=13)
    answers = await _send(hook["ingest_url"], ids)

    assert len(answers) == len(ids)
    assert [a for a in answers if a[1] != 202] == []
    by_id: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for did, _, body in answers:
        by_id[did].append(body)
    assert len(by_id) == DELIVERIES
    for did, bodies in by_id.items():
        # One answer created the todos, one per target; every other one reported them.
        made = [b for b in bodies if b["created"]]
        assert len(made) == 1 and made[0]["created"] == 2, (did, bodies)
        assert [t["endpoint_id"] for t in made[0]["todos"]] == targets
        todo_ids = sorted(t["id"] for t in made[0]["todos"])
        for again in (b for b in bodies if b is not made[0]):
            assert again["created"] == 0 and not any(t["created"] for t in again["todos"])
            assert sorted(t["id"] for t in again["todos"]) == todo_ids, (did, bodies)

    with psycopg.connect(dsn) as conn:
        events, distinct = conn.execute(
            "SELECT count(*), count(DISTINCT external_id) FROM events WHERE webhook_id = %s",
            (hook["webhook_id"],),
        ).fetchone() or (0, 0)
        todos, live_keys = conn.execute(
            "SELECT count(*), count(DISTINCT (endpoint_id, idempotency_key)) FROM todos"
            " WHERE endpoint_id = ANY(%s::uuid[])",
            (targets,),
        ).fetchone() or (0, 0)
    assert events == distinct == DELIVERIES  # 0 lost, no event twice
    assert todos == live_keys == 2 * DELIVERIES  # 0 lost, 0 duplicated todos

    flushes, written = _write_batches(httpx.get(srv.base_url + "/metrics", timeout=10).text)
    assert written == len(ids)
    assert flushes < len(ids), "concurrent deliveries were never written together"
