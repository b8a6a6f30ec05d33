"""LLM triage test helpers: the provider config, and a test's own tenant on a shared server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import psycopg
from sbtest import CLI, SHOWN_SECRETS, Server, remember_secrets
from sbworld import World

from switchboard.config import load_config
from switchboard.runtime import Runtime
from switchboard.service import webhooks

#: The provider's API key lives in this environment variable; no log may show it.
KEY_ENV = "SB_TEST_LLM_API_KEY"
API_KEY = "sk-test-" + secrets.token_hex(12)
SHOWN_SECRETS.add(API_KEY)

QUEUES = [
    {"name": "triage", "description": "bug reports and incidents a human must look at"},
    {"name": "review", "description": "pull requests waiting for a code review"},
]


def llm_toml(fake_url: str, *, fake_max_in_flight: int | None = None, **ceilings: Any) -> str:
    """``[plugins.llm]`` with the fake server as provider ``fake`` and a ``static`` one.

    ``mode`` is ``inline`` unless given: these tests check what the stage decides, which
    the producer's reply then shows (tests/plugins/llm/test_deferred.py: the worker).
    """
    ceilings.setdefault("mode", "inline")
    lines = ["[plugins.llm]"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in ceilings.items()]
    lines += [
        "[[plugins.llm.providers]]",
        'type = "openai"',
        'name = "fake"',
        f'base_url = "{fake_url}"',
        f'api_key_env = "{KEY_ENV}"',
        *([f"max_in_flight = {fake_max_in_flight}"] if fake_max_in_flight else []),
        "[[plugins.llm.providers]]",
        'type = "static"',
        'answer = {queue = "review", confidence = 0.8, reason = "static says review"}',
        "[plugins.llm.providers.answers]",
        '"static-triage" = {queue = "triage", confidence = 0.95, reason = "static says triage"}',
        '"static-broken" = "not json"',
    ]
    return "\n".join(lines) + "\n"


@dataclass
class Tenant:
    """One test's own endpoint and generic webhook on the shared server."""

    srv: Server
    rt: Runtime
    w: World
    hook: dict[str, Any]
    n: int

    @property
    def owner(self) -> str:
        return str(self.w.endpoints["owner"]["endpoint_id"])

    def model(self, name: str) -> str:
        """A model name of this test's own (the fake server answers per model)."""
        return f"{name}-{self.n}"

    async def triage(self, model: str, **overrides: Any) -> dict[str, Any]:
        from switchboard_llm import service

        doc = {
            "provider": "fake",
            "model": model,
            "queues": QUEUES,
            "min_confidence": 0.6,
            "timeout_ms": 1500,
            **overrides,
        }
        result: dict[str, Any] = await service.set_triage(self.rt, self.owner, doc)
        return result

    def deliver(self, body: Any, delivery: str) -> dict[str, Any]:
        resp = httpx.post(
            self.hook["ingest_url"],
            content=json.dumps(body).encode(),
            headers={"X-Delivery-Id": delivery, "Content-Type": "application/json"},
            timeout=30,
        )
        assert resp.status_code == 202, resp.text
        return dict(resp.json())

    @property
    def mode(self) -> str:
        """The server's llm mode (its stages are the runtime's, from one config file)."""
        deferred = any(getattr(s, "deferred", False) is True for s in self.rt.stages)
        return "deferred" if deferred else "inline"

    def route(self, body: Any, delivery: str, *, asks: bool = True) -> dict[str, Any]:
        """Deliver, and what the delivery came to, in either mode: inline the producer's
        reply; deferred (when the model is to be ``asks``-ed) the 202 says ``pending`` with
        no todos, then the worker's decision (read back from the store in the reply's
        shape: ``event_id``, ``disposition``, ``dropped``, ``todos``)."""
        reply = self.deliver(body, delivery)
        if self.mode == "inline" or not asks:
            assert reply.get("disposition") != "pending", reply
            return reply
        assert reply["disposition"] == "pending" and reply["todos"] == [], reply
        [event] = decided(self, [delivery])
        assert event["id"] == reply["event_id"] and event["queued"] == 0
        with psycopg.connect(self.srv.env["SWITCHBOARD_DATABASE_URL"]) as conn:
            todos = conn.execute(
                "SELECT id, queue FROM todos WHERE event_id = %s ORDER BY created_at",
                (event["id"],),
            ).fetchall()
        return {
            "event_id": event["id"],
            "disposition": event["disposition"],
            "dropped": event["disposition"] == "dropped",
            "todos": [{"id": str(i), "queue": q} for i, q in todos],
        }

    def stored(self, delivery: str) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
        """The event's trace and its todos' (queue, trace), from the database."""
        external_id = f"{self.hook['webhook_id']}:{delivery}"
        dsn = self.srv.env["SWITCHBOARD_DATABASE_URL"]
        with psycopg.connect(dsn) as conn:
            ((event_id, trace),) = conn.execute(
                "SELECT id, routing_trace FROM events WHERE external_id = %s", (external_id,)
            ).fetchall()
            todos = conn.execute(
                "SELECT queue, routing_trace FROM todos WHERE event_id = %s", (event_id,)
            ).fetchall()
        return trace, [(q, t) for q, t in todos]


@contextlib.asynccontextmanager
async def own_tenant(srv: Server, n: int, prefix: str) -> AsyncIterator[Tenant]:
    """A tenant of ``srv`` (its own human, endpoint and generic webhook) on a runtime of its
    own, closed again when the block ends: a fault test's own pool never meets the fault."""
    rt = Runtime(load_config(env=srv.env))
    await rt.open_store(migrate=False)
    try:
        yield await new_tenant(srv, rt, n, prefix)
    finally:
        await rt.shutdown()


async def new_tenant(srv: Server, rt: Runtime, n: int, prefix: str) -> Tenant:
    """Its own human, endpoint (webhook queues inbox, triage, review) and generic webhook,
    the webhook made in process through ``rt`` (the CLI costs a second)."""
    w = World(CLI(srv.env), prefix=f"{prefix}{n}-", direct=True)
    w.human("alice")
    owner = w.endpoint("alice", "owner", queues="inbox", webhook_queues="inbox,triage,review")
    endpoint = await rt.store.get_endpoint(owner["endpoint_id"])
    hook = await webhooks.create_webhook(rt, endpoint, "generic", "inbox")
    remember_secrets(hook)
    return Tenant(srv, rt, w, hook, n)


def event_of(t: Tenant, delivery: str) -> dict[str, Any]:
    """The stored event (disposition, trace) and its todos (queue, trace)."""
    return events_of(t, [delivery])[0]


#: Each event with its todos and pending count, in one statement for a whole list.
_EVENTS = """
SELECT e.external_id, e.id, e.disposition, e.routing_trace,
       coalesce((SELECT json_agg(json_build_array(d.queue, d.routing_trace))
                 FROM todos d WHERE d.event_id = e.id), '[]'),
       (SELECT count(*) FROM pending_events p WHERE p.event_id = e.id)
FROM events e WHERE e.external_id = ANY(%s)
"""


def events_of(t: Tenant, deliveries: list[str]) -> list[dict[str, Any]]:
    """:func:`event_of` of each delivery, on one connection in one statement (a poll over a
    burst of 200 opened 200 connections each time, slowing the servers it waited for)."""
    wanted = [f"{t.hook['webhook_id']}:{d}" for d in deliveries]
    with psycopg.connect(t.srv.env["SWITCHBOARD_DATABASE_URL"]) as conn:
        rows = conn.execute(_EVENTS, (wanted,)).fetchall()
    found: dict[str, dict[str, Any]] = {}
    for external_id, event_id, disposition, trace, todos, pending in rows:
        assert external_id not in found, f"two events for {external_id}"
        found[external_id] = {
            "id": str(event_id),
            "disposition": disposition,
            "trace": trace,
            "todos": [(q, tr) for q, tr in todos],
            "queued": pending,
        }
    missing = [w for w in wanted if w not in found]
    assert not missing, f"no event for {missing[:5]}"
    return [found[w] for w in wanted]


def fresh_minute(need: float = 10.0) -> None:
    """Wait, if need be, until the current UTC minute has ``need`` seconds left: a test
    counting one minute's budget must not see the window turn under it. The default fits
    a count of a few deliveries (under 3 s on a loaded machine) with room to spare; a
    longer wait is paid by every run that meets the minute's end (a sixth of them here,
    where 25 s made it four in ten, 12 s each)."""
    left = 60 - time.time() % 60
    if left < need:
        time.sleep(left + 0.2)


def decided(t: Tenant, deliveries: list[str], timeout: float = 30.0) -> list[dict[str, Any]]:
    """The events of ``deliveries`` once none is pending (fails after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        events = events_of(t, deliveries)
        if all(e["disposition"] != "pending" for e in events):
            return events
        if time.monotonic() > deadline:
            left = sum(e["disposition"] == "pending" for e in events)
            raise AssertionError(f"{left} of {len(events)} still pending after {timeout} s")
        time.sleep(0.1)


async def burst(t: Tenant, n: int, prefix: str, *, pending: bool = True) -> list[float]:
    """``n`` deliveries sent at once; each one's reply time in seconds."""

    async def one(client: httpx.AsyncClient, i: int) -> float:
        started = time.monotonic()
        resp = await client.post(
            t.hook["ingest_url"],
            content=json.dumps({"title": "Crash on start", "kind": "bug", "n": i}).encode(),
            headers={"X-Delivery-Id": f"{prefix}{i}", "Content-Type": "application/json"},
        )
        assert resp.status_code == 202, resp.text
        assert (resp.json().get("disposition") == "pending") is pending
        return time.monotonic() - started

    limits = httpx.Limits(max_connections=n)
    async with httpx.AsyncClient(timeout=30, limits=limits) as client:
        return list(await asyncio.gather(*(one(client, i) for i in range(n))))
