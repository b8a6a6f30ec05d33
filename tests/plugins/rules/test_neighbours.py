"""Noisy neighbours on a real server, over real HTTP: one tenant's hostile rules (slow rules
at 32 keep-alive connections; compile bombs in dry runs over MCP) never degrade another
tenant's deliveries, which stay routed by that tenant's own rules, with no fault.

test_fairness.py shows the same on a bare ``Sandbox``; here it is the whole path: the
receiver, the rules stage, the server's own sandbox with the default ``[plugins.rules]``
limits (8 slots, 2 per owner, 1 s to get them), the database and the MCP tools.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import psycopg
import pytest
from sbmcp import Agent, ToolFailed, agent
from sbtest import CLI, Server
from sbworld import World

from switchboard.routing.trace import validate_trace
from switchboard.runtime import Runtime
from switchboard.service import rules as rules_svc

_n = itertools.count()

#: The noisy tenant's saved rules: each runs until its rule_ms alarm kills the evaluator.
SLOW = [
    {"id": f"slow{i}", "expr": "until(false; .)", "action": {"queue": "inbox"}} for i in range(32)
]
#: The quiet tenant's rules: a drop first, which must keep deciding whatever the flood.
QUIET = [
    {"id": "drop-bots", "expr": ".payload.bot == true", "action": {"drop": True}},
    {"id": "all", "expr": "true", "action": {"queue": "inbox"}},
]
#: What each of the quiet tenant's deliveries must be routed by: its own rule, no fault.
DROPPED = {"stage": "rule", "rule_index": 0, "rule_id": "drop-bots", "action": {"drop": True}}
QUEUED = {"stage": "rule", "rule_index": 1, "rule_id": "all", "action": {"queue": "inbox"}}
#: A compile bomb: libjq folds these constants while compiling. 120 terms, not the 150 of
#: test_fairness.py: 150 would be over MAX_EXPR_BYTES (4096) and refused for its length
#: before any compile, never reaching the server's sandbox.
BOMB = " and ".join(['(("x" * 2e7) == ("x" * 2e7))'] * 120)
#: A generous bound on one dry run (the compile deadline is about 1 s per rule set).
DRY_RUN_S = 20.0


@pytest.fixture(scope="module")
def server(module_server_factory: Any, module_dsn: str) -> Server:
    """This module's own server, with the default ``[plugins.rules]`` limits."""
    srv: Server = module_server_factory(module_dsn)
    return srv


@dataclass
class Tenant:
    """One human with one endpoint and one generic webhook on it."""

    w: World
    endpoint: dict[str, Any]
    hook: dict[str, Any]

    @property
    def token(self) -> str:
        return str(self.endpoint["token"])


def _tenant(srv: Server, prefix: str) -> Tenant:
    w = World(CLI(srv.env), prefix=prefix, direct=True)
    w.human("human")
    endpoint = w.endpoint(
        "human", "owner", queues="inbox", webhook_queues="inbox", sources="generic"
    )
    return Tenant(w, endpoint, w.webhook("owner", "generic"))


@pytest.fixture
async def tenants(server: Server, module_runtime: Runtime) -> tuple[Tenant, Tenant]:
    """(noisy, quiet): two humans of their own on the shared server, with the quiet one's
    rules saved (the noisy one's rules are the test's own)."""
    n = next(_n)
    noisy, quiet = _tenant(server, f"nb{n}-noisy-"), _tenant(server, f"nb{n}-quiet-")
    await rules_svc.set_rules(module_runtime, None, quiet.hook["webhook_id"], QUIET)
    return noisy, quiet


def _post_args(payload: Any, delivery: str) -> dict[str, Any]:
    return {
        "content": json.dumps(payload).encode(),
        "headers": {"X-Delivery-Id": delivery, "Content-Type": "application/json"},
    }


@asynccontextmanager
async def flood(
    hook: dict[str, Any], tag: str, connections: int = 32
) -> AsyncIterator[Counter[str]]:
    """``connections`` keep-alive clients posting to ``hook`` in a loop until the block ends.

    Yields the answers so far by status (or by the exception a request raised). Every task
    is stopped and every client closed when the block ends, whatever it raised.
    """
    answers: Counter[str] = Counter()
    stop = asyncio.Event()

    async def connection(client: httpx.AsyncClient, k: int) -> None:
        for i in itertools.count():
            if stop.is_set():
                return
            try:
                resp = await client.post(
                    hook["ingest_url"], **_post_args({"n": i}, f"{tag}-{k}-{i}")
                )
                answers[str(resp.status_code)] += 1
            except httpx.HTTPError as exc:
                answers[type(exc).__name__] += 1

    async with AsyncExitStack() as stack:
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        clients = [
            await stack.enter_async_context(httpx.AsyncClient(timeout=60, limits=limits))
            for _ in range(connections)
        ]
        tasks = [asyncio.create_task(connection(c, k)) for k, c in enumerate(clients)]
        try:
            yield answers
        finally:
            stop.set()
            _, pending = await asyncio.wait(tasks, timeout=30)
            for task in pending:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def _until(what: str, check: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


@dataclass
class Sent:
    """One of the quiet tenant's deliveries: whether it was a bot's, and the answer."""

    bot: bool
    status: int
    answer: dict[str, Any]


async def quiet_deliveries(
    client: httpx.AsyncClient,
    t: Tenant,
    tag: str,
    n: int,
    gap: float = 0.02,
    until: Callable[[], bool] | None = None,
) -> dict[str, Sent]:
    """``n`` of the quiet tenant's deliveries, one after another (every other one a bot's),
    by delivery id; judged afterwards, by ``assert_routed_by_own_rules``. With ``until``,
    at most ``n``, stopping once it says so (checked before each delivery)."""
    sent: dict[str, Sent] = {}
    for i in range(n):
        if until is not None and until():
            break
        delivery, bot = f"{tag}-{i}", i % 2 == 0
        resp = await client.post(t.hook["ingest_url"], **_post_args({"bot": bot, "i": i}, delivery))
        try:
            answer = resp.json()
        except ValueError:
            answer = {"text": resp.text}
        sent[delivery] = Sent(bot, resp.status_code, answer)
        await asyncio.sleep(gap)
    return sent


def _traces(dsn: str, t: Tenant) -> dict[str, tuple[str, dict[str, Any]]]:
    """The tenant's stored events: ``{delivery id: (disposition, routing_trace)}``."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT external_id, disposition, routing_trace FROM events WHERE webhook_id = %s",
            (t.hook["webhook_id"],),
        ).fetchall()
    return {ext.rsplit(":", 1)[-1]: (disposition, trace) for ext, disposition, trace in rows}


def assert_routed_by_own_rules(dsn: str, t: Tenant, sent: dict[str, Sent]) -> None:
    """Every delivery in ``sent`` was answered and stored as its own rules decide, with no
    fault: a bot's dropped by ``drop-bots``, any other queued to inbox by ``all``."""
    stored = _traces(dsn, t)
    inbox = [{"endpoint_id": t.endpoint["endpoint_id"], "queue": "inbox", "created": True}]
    wrong = {}
    for delivery, s in sent.items():
        disposition, trace = stored.get(delivery, (None, {}))
        if s.bot:
            answered = s.answer.get("dropped") is True and s.answer.get("todos") == []
            expected = ("dropped", DROPPED)
        else:
            answered = (
                "dropped" not in s.answer
                and [
                    {k: x.get(k) for k in ("endpoint_id", "queue", "created")}
                    for x in s.answer.get("todos", ())
                ]
                == inbox
            )
            expected = ("routed", QUEUED)
        if (
            s.status != 202
            or not answered
            or (disposition, trace) != expected
            or "faults" in trace
            or "sandbox_busy" in json.dumps(trace)
        ):
            wrong[delivery] = (s.status, s.answer, disposition, trace)
        else:
            validate_trace(trace)
    causes = Counter(f["cause"] for *_, trace in wrong.values() for f in trace.get("faults", ()))
    assert not wrong, (
        f"{len(wrong)} of {len(sent)} degraded (faults: {dict(causes)}); "
        f"first: {next(iter(wrong.items()))}"
    )


def _causes(dsn: str, t: Tenant) -> Counter[str]:
    return Counter(
        f["cause"] for _, trace in _traces(dsn, t).values() for f in trace.get("faults", ())
    )


@pytest.mark.slow
async def test_slow_rules_at_32_connections_degrade_only_their_owner(
    server: Server, tenants: tuple[Tenant, Tenant], module_runtime: Runtime, module_dsn: str
) -> None:
    noisy, quiet = tenants
    await rules_svc.set_rules(module_runtime, None, noisy.hook["webhook_id"], SLOW)
    async with httpx.AsyncClient(timeout=60) as client:
        # The quiet tenant's rule set is warm on the server before the flood.
        sent = await quiet_deliveries(client, quiet, "before", 2)
        async with flood(noisy.hook, "flood") as answers:
            # The flood is on: twice as many answers as connections, so the noisy owner's
            # share has been taken for a while and its deliveries queue (and time out) behind it.
            await _until("the flood", lambda: answers.total() >= 64)
            during = answers.total()
            sent |= await quiet_deliveries(client, quiet, "during", 30)
            # its 32 requests stayed in flight meanwhile; they answer in bursts (a frame
            # ends, or a group's slot_wait_ms runs out) up to ~1 s apart, so one gap may
            # span all 30: the flood went on if it answers again, then or soon after
            await _until("the flood to answer again", lambda: answers.total() > during)
    assert set(answers) == {"202"}, answers  # the noisy tenant's deliveries are never lost

    assert_routed_by_own_rules(module_dsn, quiet, sent)
    # The noisy tenant did run (timing out rule after rule) and was held to its share.
    causes = _causes(module_dsn, noisy)
    assert causes["timeout"] > 0 and causes["sandbox_busy"] > 0, causes


async def test_compile_bombs_in_dry_runs_over_mcp_degrade_only_their_owner(
    server: Server, tenants: tuple[Tenant, Tenant], module_dsn: str
) -> None:
    noisy, quiet = tenants
    bombs = [
        {"id": f"bomb{i}", "expr": f"{BOMB} and .payload.n == {i}", "action": {"queue": "inbox"}}
        for i in range(32)
    ]
    # The quiet tenant's save compiles in the server's sandbox too: a rule it never reaches.
    resaved = [
        *QUIET,
        {"id": "never", "expr": '.payload.kind == "push"', "action": {"queue": "inbox"}},
    ]

    async def dry_run(ag: Agent, i: int) -> tuple[float, ToolFailed]:
        # params of its own: another rule set, compiled again (the same one's failed
        # compile is remembered and answered at once)
        started = time.monotonic()
        try:
            out = await ag.call(
                "test_webhook_rules",
                webhook_id=noisy.hook["webhook_id"],
                payload={"n": i},
                rules=bombs,
                params={"i": i},
            )
        except ToolFailed as exc:
            return time.monotonic() - started, exc
        raise AssertionError(f"a compile bomb compiled: {out['decision']}")

    async def save(ag: Agent) -> float:
        started = time.monotonic()
        out = await ag.call("set_webhook_rules", webhook_id=quiet.hook["webhook_id"], rules=resaved)
        assert [r["id"] for r in out["rules"]] == ["drop-bots", "all", "never"]
        return time.monotonic() - started

    async with AsyncExitStack() as stack:
        client = await stack.enter_async_context(httpx.AsyncClient(timeout=60))
        noisy_agents = [
            await stack.enter_async_context(
                agent(server.base_url + "/mcp", noisy.token, timeout=60)
            )
            for _ in range(2)
        ]
        quiet_agent = await stack.enter_async_context(
            agent(server.base_url + "/mcp", quiet.token, timeout=60)
        )
        sent = await quiet_deliveries(client, quiet, "before", 2)
        tasks = [asyncio.create_task(dry_run(ag, i)) for i, ag in enumerate(noisy_agents)]
        try:
            await asyncio.sleep(0.2)  # both dry runs are in: one compiles, one waits
            saving = asyncio.create_task(save(quiet_agent))
            tasks.append(saving)
            # Delivered while the noisy dry runs are still on (the second waits for the
            # first's compile, then compiles): counted, not timed against a fixed count.
            during = await quiet_deliveries(
                client,
                quiet,
                "during",
                400,
                gap=0.05,
                until=lambda: all(task.done() for task in tasks[:2]),
            )
            sent |= during
            overlapped = len(during) >= 1
            saved_s = await saving
            results = await asyncio.gather(*tasks[:2])
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    assert overlapped, "the quiet tenant delivered while the noisy one compiled"
    assert_routed_by_own_rules(module_dsn, quiet, sent)
    assert saved_s < DRY_RUN_S, saved_s
    for elapsed, failed in results:
        # refused as a compile failure (never run), or told the sandbox is busy: promptly
        assert elapsed < DRY_RUN_S, (elapsed, failed.text)
        assert failed.code in ("invalid_expression", "unavailable"), failed.text
    compiled = [f for _, f in results if f.code == "invalid_expression"]
    assert compiled, [f.text for _, f in results]
    assert all("does not compile" in f.text for f in compiled), [f.text for f in compiled]
