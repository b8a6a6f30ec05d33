"""Rules on the live path: first match, narrowed fan-out, drop, grant re-check, faults."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path
from typing import Any

import httpx
import psutil
import psycopg
import pytest
from psycopg.types.json import Jsonb
from sbtest import CLI, Server
from sbworld import World

from switchboard.errors import ServiceError
from switchboard.routing.trace import validate_trace
from switchboard.runtime import Runtime
from switchboard.service import events as events_svc
from switchboard.service import rules as rules_svc

_tenant = itertools.count()


@pytest.fixture(scope="module")
def rules_server(
    module_server_factory: Any, module_dsn: str, tmp_path_factory: pytest.TempPathFactory
) -> Server:
    """The module's shared server, with a small sandbox pool."""
    config = tmp_path_factory.mktemp("rules-config") / "sb.toml"
    config.write_text("[plugins.rules]\nmax_concurrency = 2\nslot_wait_ms = 1000\n")
    srv: Server = module_server_factory(module_dsn, config=config)
    return srv


@pytest.fixture
def world(rules_server: Server) -> tuple[Server, World]:
    """This test's own tenant on the shared server: alice and three of her endpoints."""
    w = World(CLI(rules_server.env), prefix=f"t{next(_tenant)}-", direct=True)
    w.human("alice")
    w.endpoint("alice", "owner", queues="inbox", webhook_queues="inbox,triage")
    w.endpoint("alice", "pool-m", queues="handoff")
    w.endpoint("alice", "pool-l", queues="handoff")
    return rules_server, w


def _deliver(hook: dict[str, Any], body: Any, delivery: str) -> dict[str, Any]:
    resp = httpx.post(
        hook["ingest_url"],
        content=json.dumps(body).encode(),
        headers={"X-Delivery-Id": delivery, "Content-Type": "application/json"},
        timeout=30,
    )
    assert resp.status_code == 202, resp.text
    return dict(resp.json())


def _rows(dsn: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return list(conn.execute(sql, args).fetchall())


#: Scopes to this test's own rows: ``%(hook)s`` is its webhook, ``%(eps)s`` its endpoints.
_MY_EVENTS = "e.webhook_id = %(hook)s"
_MY_TODOS = "t.endpoint_id = ANY(%(eps)s::uuid[])"


def _mine(dsn: str, sql: str, hook: dict[str, Any], w: World) -> list[tuple[Any, ...]]:
    """``_rows`` for a query scoped with ``_MY_EVENTS`` / ``_MY_TODOS``."""
    with psycopg.connect(dsn) as conn:
        args = {"hook": hook["webhook_id"], "eps": w.endpoint_ids()}
        return list(conn.execute(sql, args).fetchall())


async def test_first_match_narrowed_fan_out_and_drop(
    world: Any, module_runtime: Runtime, module_dsn: str
) -> None:
    runtime, dsn = module_runtime, module_dsn
    srv, w = world
    hook = w.webhook("owner", "generic")
    w.route(hook["webhook_id"], "pool-m")
    w.route(hook["webhook_id"], "pool-l")
    m = w.endpoints["pool-m"]["endpoint_id"]
    saved = await rules_svc.set_rules(
        runtime,
        None,
        hook["webhook_id"],
        [
            {"id": "noise", "expr": '.payload.kind == "noise"', "action": {"drop": True}},
            {
                "id": "medium",
                "name": "lane m",
                "expr": ".payload.lane == $params.lane",
                "action": {"queue": "handoff", "endpoints": [m]},
            },
            {"id": "also-medium", "expr": '.payload.lane == "m"', "action": {"queue": "triage"}},
        ],
        params={"lane": "m"},
    )
    assert [r["id"] for r in saved["rules"]] == ["noise", "medium", "also-medium"]
    assert saved["grant"]["endpoints"][0] == w.endpoints["owner"]["endpoint_id"]

    routed = _deliver(hook, {"lane": "m"}, "d1")
    assert [(t["endpoint_id"], t["queue"]) for t in routed["todos"]] == [(m, "handoff")]
    unmatched = _deliver(hook, {"lane": "s"}, "d2")
    assert {t["queue"] for t in unmatched["todos"]} == {"inbox"} and unmatched["created"] == 3
    dropped = _deliver(hook, {"kind": "noise", "lane": "m"}, "d3")
    assert dropped == {
        "todos": [],
        "created": 0,
        "dropped": True,
        "verified": False,
        "trust_mode": "token",
    }

    traces = _mine(
        dsn,
        "SELECT e.external_id, e.routing_trace FROM events e"
        f" WHERE {_MY_EVENTS} ORDER BY received_at",
        hook,
        w,
    )
    assert len(traces) == 3
    assert traces[0][1] == {
        "stage": "rule",
        "rule_index": 1,
        "rule_id": "medium",
        "rule_name": "lane m",
        "action": {"queue": "handoff", "endpoints": [m]},
    }
    assert traces[1][1]["stage"] == "default" and traces[1][1]["cause"] == "no_match_default"
    assert traces[2][1]["action"] == {"drop": True}
    # The drop kept its receipt and created no todo.
    assert _mine(
        dsn,
        "SELECT count(*) FROM todos t JOIN events e ON e.id = t.event_id"
        f" WHERE {_MY_EVENTS} AND e.external_id LIKE '%%:d3'",
        hook,
        w,
    ) == [(0,)]
    # Every stored trace, on events and todos, validates against the schema.
    stored = _mine(
        dsn,
        f"SELECT routing_trace FROM events e WHERE {_MY_EVENTS} UNION ALL "
        f"SELECT routing_trace FROM todos t WHERE {_MY_TODOS}",
        hook,
        w,
    )
    assert len(stored) == 3 + 4  # d1: one todo; d2: three; d3: dropped
    for (trace,) in stored:
        validate_trace(trace)
    todo_traces = _mine(
        dsn,
        "SELECT t.routing_trace, e.routing_trace FROM todos t "
        f"JOIN events e ON e.id = t.event_id WHERE {_MY_TODOS}",
        hook,
        w,
    )
    assert len(todo_traces) == 4
    assert all(a == b for a, b in todo_traces)


async def test_drop_is_sticky_after_the_rules_change(
    world: Any, module_runtime: Runtime, module_dsn: str
) -> None:
    runtime, dsn = module_runtime, module_dsn
    srv, w = world
    hook = w.webhook("owner", "generic")
    await rules_svc.set_rules(runtime, None, hook["webhook_id"], [], default_action={"drop": True})
    assert _deliver(hook, {"x": 1}, "same")["dropped"] is True
    await rules_svc.set_rules(runtime, None, hook["webhook_id"], [])
    again = _deliver(hook, {"x": 1}, "same")
    assert again["dropped"] is True and again["todos"] == []
    assert _mine(dsn, f"SELECT count(*) FROM events e WHERE {_MY_EVENTS}", hook, w) == [(1,)]
    assert _mine(dsn, f"SELECT count(*) FROM todos t WHERE {_MY_TODOS}", hook, w) == [(0,)]
    # A new delivery now takes the loosened rules.
    assert _deliver(hook, {"x": 1}, "new")["created"] == 1


async def test_a_bom_prefixed_body_is_routed_on_its_json(
    world: Any, module_runtime: Runtime, module_dsn: str
) -> None:
    """A UTF-8 byte order mark before the JSON (issue 38) is dropped before parsing: the
    rule sees the payload, and the stored event keeps the body's own bytes."""
    srv, w = world
    hook = w.webhook("owner", "generic")
    rule = {"id": "x", "expr": ".payload.x == 1", "action": {"queue": "triage"}}
    await rules_svc.set_rules(module_runtime, None, hook["webhook_id"], [rule])
    body = b'\xef\xbb\xbf{"x": 1}'
    resp = httpx.post(
        hook["ingest_url"],
        content=body,
        headers={"X-Delivery-Id": "bom", "Content-Type": "application/json"},
        timeout=30,
    )
    assert resp.status_code == 202, resp.text
    assert [t["queue"] for t in resp.json()["todos"]] == ["triage"]
    [(event_id, stored, trace)] = _mine(
        module_dsn,
        f"SELECT e.id, e.body, e.routing_trace FROM events e WHERE {_MY_EVENTS}",
        hook,
        w,
    )
    assert bytes(stored) == body and trace["rule_id"] == "x"
    event = await events_svc.get_event(module_runtime, None, hook["webhook_id"], str(event_id))
    assert event["payload"] == {"x": 1}
    [(envelope,)] = _mine(module_dsn, f"SELECT t.payload FROM todos t WHERE {_MY_TODOS}", hook, w)
    assert envelope["payload"] == {"x": 1} and envelope["size"] == len(body)


async def test_grant_is_reapplied_after_a_route_is_removed(
    world: Any, module_runtime: Runtime, module_dsn: str
) -> None:
    runtime, dsn = module_runtime, module_dsn
    srv, w = world
    hook = w.webhook("owner", "generic")
    w.route(hook["webhook_id"], "pool-m")
    m = w.endpoints["pool-m"]["endpoint_id"]
    await rules_svc.set_rules(
        runtime,
        None,
        hook["webhook_id"],
        [
            {"id": "to-m", "expr": "true", "action": {"queue": "handoff", "endpoints": [m]}},
            {"id": "broad", "expr": "true", "action": {"queue": "inbox"}},
        ],
    )
    w.cli.json("webhook", "route", "remove", hook["webhook_id"], m)
    out = _deliver(hook, {}, "after-revoke")
    # The matched rule no longer fits: the default, never the broader rule below it.
    assert [t["queue"] for t in out["todos"]] == ["inbox"]
    [(trace,)] = _mine(dsn, f"SELECT routing_trace FROM events e WHERE {_MY_EVENTS}", hook, w)
    assert trace["stage"] == "default" and trace["cause"] == "rule_not_granted"
    assert trace["rule_id"] == "to-m"


async def test_save_refuses_an_endpoint_that_is_not_a_target(
    world: Any, module_runtime: Runtime
) -> None:
    runtime = module_runtime
    srv, w = world
    hook = w.webhook("owner", "generic")
    with pytest.raises(ServiceError) as info:
        await rules_svc.add_rule(
            runtime,
            None,
            hook["webhook_id"],
            expr="true",
            action={"queue": "handoff", "endpoints": [w.endpoints["pool-l"]["endpoint_id"]]},
        )
    assert info.value.code == "not_granted"


def _store_rules_by_sql(dsn: str, webhook_id: str, exprs: list[str]) -> None:
    """The operator's SQL bypass: skips save-time validation, as the design warns."""
    rules = [{"id": f"r{i}", "expr": e, "action": {"queue": "triage"}} for i, e in enumerate(exprs)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE endpoint_webhooks SET routing = jsonb_set(routing, '{rules}', %s)"
            " WHERE id = %s",
            (Jsonb(rules), webhook_id),
        )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("expr", "causes"),
    [
        ("last(range(1e12)) > 0", {"timeout", "budget_exhausted"}),
        ('"x" * 1e9 | length > 0', {"compile_error", "sandbox_failure"}),
        (
            'reduce range(40) as $i ("x"; . + .) | length > 0',
            {"error", "sandbox_failure", "timeout", "budget_exhausted"},
        ),
        ("def f: f; f", {"timeout", "budget_exhausted", "error"}),
        (
            "[limit(100000; repeat([.]))] | flatten | length > 0",
            {"error", "sandbox_failure", "timeout", "budget_exhausted"},
        ),
    ],
)
def test_runaway_rules_degrade_to_the_default(
    world: Any, module_dsn: str, expr: str, causes: set[str]
) -> None:
    dsn = module_dsn
    srv, w = world
    hook = w.webhook("owner", "generic")
    _store_rules_by_sql(dsn, hook["webhook_id"], [expr, ".payload.ok == true"])
    proc = psutil.Process(srv.proc.pid)
    out = _deliver(hook, {"ok": True}, "fault-1")
    # Either the faulting rule was skipped and the second matched, or the sandbox failed
    # as a whole and the default took it: the delivery is never lost.
    assert out["created"] == 1
    [(trace,)] = _mine(dsn, f"SELECT routing_trace FROM events e WHERE {_MY_EVENTS}", hook, w)
    validate_trace(trace)
    assert {f["cause"] for f in trace["faults"]} & causes, trace
    rss = proc.memory_info().rss
    for i in range(3):
        _deliver(hook, {"ok": True}, f"fault-more-{i}")
    assert proc.memory_info().rss < rss + 32 * 2**20, "the server's memory must stay flat"
    assert httpx.get(srv.base_url + "/healthz", timeout=10).status_code == 200


@pytest.mark.slow
async def test_sandbox_busy_under_a_flood(server_factory: Any, dsn: str, tmp_path: Path) -> None:
    # Its own server and database: a one-slot sandbox config, and it counts every row.
    config = tmp_path / "busy.toml"
    config.write_text("[plugins.rules]\nmax_concurrency = 1\nslot_wait_ms = 20\n")
    srv = server_factory(dsn, config=config)
    w = World(CLI(srv.env))
    w.human("alice")
    w.endpoint("alice", "owner", queues="inbox", webhook_queues="inbox,triage")
    hook = w.webhook("owner", "generic")
    _store_rules_by_sql(dsn, hook["webhook_id"], ["last(range(1e12)) > 0"])
    async with httpx.AsyncClient(timeout=60) as client:
        resps = await asyncio.gather(
            *[
                client.post(hook["ingest_url"], content=b"{}", headers={"X-Delivery-Id": f"f{i}"})
                for i in range(12)  # more than one frame holds (8): the rest wait for the slot
            ]
        )
    assert all(r.status_code == 202 for r in resps)
    causes = [
        {f["cause"] for f in t["faults"]} for (t,) in _rows(dsn, "SELECT routing_trace FROM events")
    ]
    assert len(causes) == 12
    assert any("sandbox_busy" in c for c in causes), causes
    assert _rows(dsn, "SELECT count(*) FROM todos") == [(12,)]
