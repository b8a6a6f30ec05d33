"""The prompt budget is counted in PostgreSQL: concurrent reservations, whether from one
process's pool or from two servers, never pass the per-minute or per-day limit."""

from __future__ import annotations

import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import psycopg
import pytest
from fakeai import FakeAI
from sbllm import API_KEY, KEY_ENV, Tenant
from sbtest import Server
from switchboard_llm import service, store

from switchboard.routing.trace import validate_trace


def _clear_of_a_minute_boundary(dsn: str, margin: float = 5.0) -> None:
    """Sleep past the next minute when fewer than ``margin`` seconds are left in this one
    (the database's clock decides the window), so a test's prompts share one window."""
    with psycopg.connect(dsn) as conn:
        (second,) = conn.execute("SELECT extract(second FROM clock_timestamp())").fetchone()
    left = 60 - float(second)
    if left < margin:
        time.sleep(left + 0.5)


async def test_concurrent_reservations_never_pass_the_minute(tenant: Tenant) -> None:
    t = tenant
    _clear_of_a_minute_boundary(t.srv.env["SWITCHBOARD_DATABASE_URL"])
    results = await asyncio.gather(*(store.reserve(t.rt, t.owner, 7, 1000) for _ in range(30)))
    assert results.count(None) == 7
    assert set(results) == {None, "minute"}
    # Refused prompts took nothing from the day either.
    assert (await service.get_triage(t.rt, t.owner))["usage"] == {"minute": 7, "day": 7}


async def test_a_spent_day_gives_the_minute_back(tenant: Tenant) -> None:
    t = tenant
    _clear_of_a_minute_boundary(t.srv.env["SWITCHBOARD_DATABASE_URL"])
    assert [await store.reserve(t.rt, t.owner, 10, 2) for _ in range(4)] == [
        None,
        None,
        "day",
        "day",
    ]
    assert (await service.get_triage(t.rt, t.owner))["usage"] == {"minute": 2, "day": 2}


async def test_a_lowered_limit_applies_to_prompts_already_spent(tenant: Tenant) -> None:
    t = tenant
    _clear_of_a_minute_boundary(t.srv.env["SWITCHBOARD_DATABASE_URL"])
    assert [await store.reserve(t.rt, t.owner, 5, 100) for _ in range(3)] == [None] * 3
    assert await store.reserve(t.rt, t.owner, 2, 100) == "minute"
    assert await store.reserve(t.rt, t.owner, 4, 100) is None


async def test_old_windows_are_swept(tenant: Tenant) -> None:
    t = tenant
    async with t.rt.store.db.conn() as conn:
        await conn.execute(
            "INSERT INTO llm_triage_budget (endpoint_id, span, window_start, used) VALUES"
            " (%s, 'minute', now() - interval '3 days', 9),"
            " (%s, 'day', date_trunc('day', now()) - interval '5 days', 9)",
            (t.owner, t.owner),
        )
    _clear_of_a_minute_boundary(t.srv.env["SWITCHBOARD_DATABASE_URL"])
    assert await store.reserve(t.rt, t.owner, 5, 100) is None
    async with t.rt.store.db.conn() as conn:
        cur = await conn.execute(
            "SELECT span, used FROM llm_triage_budget WHERE endpoint_id = %s ORDER BY span",
            (t.owner,),
        )
        assert await cur.fetchall() == [{"span": "day", "used": 1}, {"span": "minute", "used": 1}]


@pytest.mark.slow
async def test_two_servers_never_exceed_the_per_minute_budget(
    tenant: Tenant, fake_ai: FakeAI, module_server_factory: Any, module_dsn: str
) -> None:
    """Two ``switchboard serve`` processes on one database, deliveries racing on both:
    exactly the budget's prompts reach the model, the rest take the default."""
    t = tenant
    second: Server = module_server_factory(
        module_dsn, config=t.srv.env["SWITCHBOARD_CONFIG"], env_extra={KEY_ENV: API_KEY}
    )
    budget, deliveries = 3, 12
    # A slow-ish model keeps the calls in flight together.
    model = fake_ai.on(
        t.model("race"), {"queue": "triage", "confidence": 0.9, "reason": "r"}, delay=0.3
    )
    await t.triage(model, prompt_budget_per_minute=budget)
    _clear_of_a_minute_boundary(module_dsn, margin=10)
    token_path = t.hook["ingest_url"].split("/webhooks/", 1)[1]
    urls = [f"{srv.base_url}/webhooks/{token_path}" for srv in (t.srv, second)]

    def post(i: int) -> int:
        resp = httpx.post(
            urls[i % 2],
            content=json.dumps({"n": i}).encode(),
            headers={"X-Delivery-Id": f"race-{i}", "Content-Type": "application/json"},
            timeout=30,
        )
        return resp.status_code

    with ThreadPoolExecutor(deliveries) as pool:
        statuses = await asyncio.get_running_loop().run_in_executor(
            None, lambda: list(pool.map(post, range(deliveries)))
        )
    assert statuses == [202] * deliveries
    causes = []
    for i in range(deliveries):
        trace, todos = t.stored(f"race-{i}")
        validate_trace(trace)
        causes.append(trace.get("cause", trace["stage"]))
    assert causes.count("llm") == budget
    assert causes.count("llm_budget_exhausted") == deliveries - budget
    assert len(fake_ai.requests(model)) == budget
    assert (await service.get_triage(t.rt, t.owner))["usage"]["minute"] == budget
