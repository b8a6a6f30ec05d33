"""The receiver end to end: real HTTP into `switchboard serve`, real PostgreSQL out."""

from __future__ import annotations

import asyncio
import itertools
import json
import select
import uuid
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from sbtest import CLI, Server, database_refusing
from sbworld import World

from switchboard.cli.send import build_request

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


_tenant = itertools.count()


def _build(w: World) -> World:
    w.human("alice")
    w.human("bob")
    w.endpoint("alice", "owner", queues="inbox,handoff", webhook_queues="inbox")
    return w


@pytest.fixture
def world(module_server: Server) -> tuple[Server, World]:
    """This test's own tenant (alice, bob, alice's ``owner``) on the module's shared server."""
    w = World(CLI(module_server.env), prefix=f"t{next(_tenant)}-", direct=True)
    return module_server, _build(w)


@pytest.fixture
def own_world(server_factory: Any, dsn: str) -> tuple[Server, World]:
    """The same world, built by the real CLI, on a server and database of its own."""
    srv = server_factory(dsn)
    return srv, _build(World(CLI(srv.env)))


def _post(url: str, source: str, body: bytes, secret: str | None, **kw: Any) -> httpx.Response:
    data, headers = build_request(
        source,
        body,
        secret.encode() if secret else None,
        kw.get("event"),
        kw.get("headers", []),
        kw.get("stamp", False),
    )
    return httpx.post(url, content=data, headers=headers, timeout=30)


def _scalar(dsn: str, sql: str, *args: Any) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(sql, args).fetchone()
        assert row is not None
        return int(row[0])


def _events(dsn: str, *hooks: dict[str, Any]) -> int:
    """How many events this test's webhooks stored."""
    return _scalar(
        dsn,
        "SELECT count(*) FROM events WHERE webhook_id = ANY(%s::uuid[])",
        [h["webhook_id"] for h in hooks],
    )


def _todos(dsn: str, w: World) -> int:
    """How many todos this test's endpoints hold."""
    return _scalar(
        dsn, "SELECT count(*) FROM todos WHERE endpoint_id = ANY(%s::uuid[])", w.endpoint_ids()
    )


def test_generic_delivery_becomes_a_todo_with_a_trace(world: Any, module_dsn: str) -> None:
    srv, w = world
    hook = w.webhook("owner", "generic")
    assert "signing_secret" not in hook
    body = json.dumps({"hello": "world", "big": 12345678901234567890123}).encode()
    resp = httpx.post(
        hook["ingest_url"],
        content=body,
        timeout=30,
        headers={
            "Content-Type": "application/json",
            "X-Delivery-Id": "d-1",
            "Authorization": "Bearer abc",
            "X-Callback": "https://x.test/cb?token=s3cret&x=1",
        },
    )
    assert resp.status_code == 202, resp.text
    doc = resp.json()
    assert doc["created"] == 1 and doc["verified"] is False and doc["trust_mode"] == "token"
    [todo] = doc["todos"]
    assert todo["endpoint_id"] == w.endpoints["owner"]["endpoint_id"]
    assert todo["queue"] == "inbox" and todo["created"] is True
    assert "trace" not in resp.text and "routing_trace" not in resp.text
    with psycopg.connect(module_dsn) as conn:
        [ev] = conn.execute(
            "SELECT external_id, headers, routing_trace, webhook_id, verified,"
            " body FROM events WHERE webhook_id = %s",
            (hook["webhook_id"],),
        ).fetchall()
        assert ev[0] == f"{hook['webhook_id']}:d-1"
        assert ev[1]["authorization"] == "«redacted»"
        assert "s3cret" not in json.dumps(ev[1])
        expected = {"stage": "default", "cause": "no_match_default", "action": {"queue": "inbox"}}
        assert ev[2] == expected and str(ev[3]) == hook["webhook_id"] and ev[4] is False
        assert bytes(ev[5]) == body
        [t] = conn.execute(
            "SELECT idempotency_key, routing_trace, payload FROM todos"
            " WHERE endpoint_id = ANY(%s::uuid[])",
            (w.endpoint_ids(),),
        ).fetchall()
        assert t[0] == ev[0] and t[1] == expected
        assert t[2]["payload"]["big"] == 12345678901234567890123


def test_unknown_token_and_oversize_body(world: Any, module_dsn: str) -> None:
    srv, w = world
    # An unknown token names no webhook to scope by: the table as a whole must not grow
    # (a module's tests run one at a time, so its growth here is this test's).
    events_before = _scalar(module_dsn, "SELECT count(*) FROM events")
    resp = httpx.post(srv.base_url + "/webhooks/w/" + "0" * 48, content=b"{}", timeout=30)
    assert resp.status_code == 404 and resp.json() == {
        "error": "unknown webhook",
        "code": "not_found",
    }
    hook = w.webhook("owner", "generic")
    big = b"x" * (5 * 1024 * 1024 + 1)
    resp = httpx.post(hook["ingest_url"], content=big, timeout=60)
    assert resp.status_code == 413 and resp.json() == {
        "error": "payload too large",
        "code": "payload_too_large",
    }
    # Size is checked before the token: an unknown token with a huge body is still 413.
    resp = httpx.post(srv.base_url + "/webhooks/w/nope", content=big, timeout=60)
    assert resp.status_code == 413
    assert _events(module_dsn, hook) == 0
    assert _scalar(module_dsn, "SELECT count(*) FROM events") == events_before


@pytest.mark.parametrize("source", ["cairn", "gitea", "github"])
def test_signed_sources_accept_right_and_refuse_wrong(
    world: Any, module_dsn: str, source: str
) -> None:
    srv, w = world
    hook = w.webhook("owner", source)
    secret = hook["signing_secret"]
    assert secret.startswith("whsec_") and len(secret) == 6 + 64
    body = (
        FIXTURES / f"{source}_issue_opened.json"
        if source != "cairn"
        else FIXTURES / "cairn_artifact_created.json"
    )
    if not body.exists():
        body = next(FIXTURES.glob(f"{source}*.json"))
    raw = body.read_bytes()
    bad = _post(hook["ingest_url"], source, raw, "whsec_" + "0" * 64, event="issues", stamp=True)
    assert bad.status_code == 401 and bad.json() == {
        "error": "signature verification failed",
        "code": "unauthenticated",
    }
    assert _events(module_dsn, hook) == 0 and _todos(module_dsn, w) == 0
    ok = _post(hook["ingest_url"], source, raw, secret, event="issues", stamp=True)
    assert ok.status_code == 202, ok.text
    assert ok.json()["verified"] is True and ok.json()["trust_mode"] == "signed"
    assert _events(module_dsn, hook) == 1


def test_fan_out_order_and_route_removal(world: Any) -> None:
    srv, w = world
    w.endpoint("alice", "pool-a")
    w.endpoint("bob", "pool-b")
    w.friend("alice", "bob")
    hook = w.webhook("owner", "generic")
    w.route(hook["webhook_id"], "pool-b")
    w.route(hook["webhook_id"], "pool-a")
    resp = httpx.post(
        hook["ingest_url"], content=b'{"n":1}', headers={"X-Delivery-Id": "one"}, timeout=30
    )
    ids = [t["endpoint_id"] for t in resp.json()["todos"]]
    order = [w.endpoints[n]["endpoint_id"] for n in ("owner", "pool-b", "pool-a")]
    assert ids == order and resp.json()["created"] == 3

    w.cli.json(
        "webhook", "route", "remove", hook["webhook_id"], w.endpoints["pool-b"]["endpoint_id"]
    )
    resp = httpx.post(
        hook["ingest_url"], content=b'{"n":2}', headers={"X-Delivery-Id": "two"}, timeout=30
    )
    assert [t["endpoint_id"] for t in resp.json()["todos"]] == [order[0], order[2]]

    # An un-approved friendship is re-checked on every delivery.
    w.route(hook["webhook_id"], "pool-b")
    w.friend("alice", "bob", state="revoked")
    resp = httpx.post(
        hook["ingest_url"], content=b'{"n":3}', headers={"X-Delivery-Id": "three"}, timeout=30
    )
    assert [t["endpoint_id"] for t in resp.json()["todos"]] == [order[0], order[2]]


def test_route_to_a_stranger_is_forbidden(world: Any) -> None:
    srv, w = world
    w.endpoint("bob", "pool-b")
    hook = w.webhook("owner", "generic")
    proc = w.cli.run(
        "webhook",
        "route",
        "add",
        hook["webhook_id"],
        w.endpoints["pool-b"]["endpoint_id"],
        check=False,
    )
    assert proc.returncode == 1 and "forbidden" in proc.stderr
    proc2 = w.cli.run("webhook", "route", "add", hook["webhook_id"], str(uuid.uuid4()), check=False)
    # No existence oracle: a missing endpoint reads exactly like a stranger's.
    assert proc2.stderr == proc.stderr


def test_no_live_target_is_503(world: Any, module_dsn: str) -> None:
    srv, w = world
    hook = w.webhook("owner", "generic")
    w.cli.json("endpoint", "revoke", w.endpoints["owner"]["endpoint_id"])
    resp = httpx.post(hook["ingest_url"], content=b"{}", timeout=30)
    assert resp.status_code == 503 and resp.json() == {
        "error": "webhook not configured",
        "code": "unavailable",
    }
    # like every 503 "unavailable": when to try again
    assert resp.headers.get("Retry-After") == "2"
    assert _events(module_dsn, hook) == 0


def test_long_delivery_ids_stay_distinct_and_each_dedups(world: Any, module_dsn: str) -> None:
    """Ids over 256 bytes are keyed by their own hash, never by the body's: two of them
    with the same body are two deliveries, and a redelivery of one is recognised."""
    srv, w = world
    hook = w.webhook("owner", "generic")
    body = b'{"ping": true}'
    created = []
    for delivery_id in ("A" * 300, "B" * 300, "A" * 300):
        resp = httpx.post(
            hook["ingest_url"], content=body, headers={"X-Delivery-Id": delivery_id}, timeout=30
        )
        assert resp.status_code == 202, resp.text
        created.append(resp.json()["created"])
    assert created == [1, 1, 0]
    assert _events(module_dsn, hook) == 2
    with psycopg.connect(module_dsn) as conn:
        keys = [
            r[0].split(":", 1)[1]
            for r in conn.execute(
                "SELECT external_id FROM events WHERE webhook_id = %s", (hook["webhook_id"],)
            )
        ]
    assert all(k.startswith("id-sha256:") for k in keys), keys


def test_a_long_kind_makes_a_title_cut_like_any_other(world: Any, module_dsn: str) -> None:
    srv, w = world
    hook = w.webhook("owner", "generic")
    resp = httpx.post(
        hook["ingest_url"], content=b"{}", headers={"X-GitHub-Event": "k" * 7000}, timeout=30
    )
    assert resp.status_code == 202, resp.text
    [todo] = resp.json()["todos"]
    with psycopg.connect(module_dsn) as conn:
        row = conn.execute("SELECT title FROM todos WHERE id = %s", (todo["id"],)).fetchone()
    assert row is not None and row[0] == ("generic " + "k" * 7000)[:200]


@pytest.mark.slow
async def test_fifty_concurrent_redeliveries_make_one_event(world: Any, module_dsn: str) -> None:
    srv, w = world
    w.endpoint("alice", "pool-a")
    w.endpoint("alice", "pool-c")
    hook = w.webhook("owner", "github")
    w.route(hook["webhook_id"], "pool-a")
    w.route(hook["webhook_id"], "pool-c")
    raw = (
        (FIXTURES / "github_issues_opened.json").read_bytes()
        if (FIXTURES / "github_issues_opened.json").exists()
        else b'{"action":"opened"}'
    )
    data, headers = build_request(
        "github", raw, hook["signing_secret"].encode(), "issues", [], False
    )
    async with httpx.AsyncClient(timeout=60) as client:
        resps = await asyncio.gather(
            *[client.post(hook["ingest_url"], content=data, headers=headers) for _ in range(50)]
        )
    assert [r.status_code for r in resps] == [202] * 50
    assert sum(r.json()["created"] for r in resps) == 3
    todo_sets = {tuple(sorted(t["id"] for t in r.json()["todos"])) for r in resps}
    assert len(todo_sets) == 1 and len(next(iter(todo_sets))) == 3
    assert _events(module_dsn, hook) == 1 and _todos(module_dsn, w) == 3


def test_doorbell_rings_for_new_todos_only(world: Any, module_dsn: str) -> None:
    srv, w = world
    hook = w.webhook("owner", "generic")
    with psycopg.connect(module_dsn, autocommit=True) as conn:
        conn.execute("LISTEN todo_ready")
        for _ in range(2):  # the second is a redelivery: no ring
            resp = httpx.post(
                hook["ingest_url"], content=b"{}", headers={"X-Delivery-Id": "bell"}, timeout=30
            )
            assert resp.status_code == 202
        rings = []
        deadline = 5.0
        while select.select([conn.fileno()], [], [], deadline) != ([], [], []):
            deadline = 1.0
            rings += [n.payload for n in conn.notifies(timeout=0.1, stop_after=10)]
        # Sinks ring after the response, so an earlier test's late ring may land here:
        # only this tenant's endpoints count.
        mine = tuple(w.endpoint_ids())
        assert [r for r in rings if r.startswith(mine)] == [
            f"{w.endpoints['owner']['endpoint_id']}:inbox"
        ]


@pytest.mark.slow
def test_database_failure_mid_delivery_leaves_nothing(world: Any, module_dsn: str) -> None:
    srv, w = world
    hook = w.webhook("owner", "generic")
    owner = uuid.UUID(w.endpoints["owner"]["endpoint_id"])
    check = f"no_todos_{owner.hex}"
    try:
        with psycopg.connect(module_dsn, autocommit=True) as conn:
            # The event insert succeeds, then the todo insert fails inside the same
            # transaction (only for this test's endpoint: the database is the module's).
            conn.execute(
                f"ALTER TABLE todos ADD CONSTRAINT {check}"
                f" CHECK (queue <> 'inbox' OR endpoint_id <> '{owner}')"
            )
        resp = httpx.post(
            hook["ingest_url"], content=b"{}", headers={"X-Delivery-Id": "f"}, timeout=30
        )
        assert resp.status_code >= 500
        assert _events(module_dsn, hook) == 0 and _todos(module_dsn, w) == 0
    finally:
        with psycopg.connect(module_dsn, autocommit=True) as conn:
            conn.execute(f"ALTER TABLE todos DROP CONSTRAINT IF EXISTS {check}")
    # The producer's retry then lands once.
    resp = httpx.post(hook["ingest_url"], content=b"{}", headers={"X-Delivery-Id": "f"}, timeout=30)
    assert resp.status_code == 202 and resp.json()["created"] == 1


def test_webhook_ceilings(world: Any) -> None:
    srv, w = world
    w.endpoint("alice", "tight", sources="generic", webhook_queues="inbox", webhook_max=1)
    proc = w.cli.run(
        "webhook",
        "create",
        "--endpoint",
        w.endpoints["tight"]["endpoint_id"],
        "--source",
        "cairn",
        "--target-queue",
        "inbox",
        check=False,
    )
    assert proc.returncode == 1 and "forbidden_source_type" in proc.stderr
    proc = w.cli.run(
        "webhook",
        "create",
        "--endpoint",
        w.endpoints["tight"]["endpoint_id"],
        "--source",
        "generic",
        "--target-queue",
        "other",
        check=False,
    )
    assert proc.returncode == 1 and "ceiling_exceeded" in proc.stderr
    w.webhook("tight", "generic")
    proc = w.cli.run(
        "webhook",
        "create",
        "--endpoint",
        w.endpoints["tight"]["endpoint_id"],
        "--source",
        "generic",
        "--target-queue",
        "inbox",
        check=False,
    )
    assert proc.returncode == 1 and "webhook_max" in proc.stderr


def test_send_command_posts_like_the_producer(world: Any, tmp_path: Path) -> None:
    srv, w = world
    hook = w.webhook("owner", "cairn")
    src = FIXTURES / "cairn_artifact_created.json"
    out = w.cli.json(
        "send",
        "--url",
        hook["ingest_url"],
        "--source",
        "cairn",
        "--secret",
        hook["signing_secret"],
        "--stamp",
        str(src),
    )
    assert out["status"] == 202 and out["response"]["created"] == 1
    proc = w.cli.run(
        "send",
        "--url",
        hook["ingest_url"],
        "--source",
        "cairn",
        "--secret",
        "whsec_wrong",
        "--stamp",
        str(src),
        check=False,
    )
    assert proc.returncode == 1 and json.loads(proc.stdout)["status"] == 401


@pytest.mark.slow
def test_database_going_away_answers_503_and_the_retry_lands_once(
    own_world: Any, dsn: str, pg_server: Any
) -> None:
    # Its own server and database: it refuses connections to the whole database.
    srv, w = own_world
    hook = w.webhook("owner", "generic")
    with database_refusing(pg_server, dsn):
        resp = httpx.post(
            hook["ingest_url"], content=b"{}", headers={"X-Delivery-Id": "gone"}, timeout=60
        )
        assert resp.status_code == 503, resp.text
    # The producer retries; the pool reconnects; the delivery lands exactly once.
    for _ in range(3):
        resp = httpx.post(
            hook["ingest_url"], content=b"{}", headers={"X-Delivery-Id": "gone"}, timeout=60
        )
        if resp.status_code == 202:
            break
    assert resp.status_code == 202 and resp.json()["created"] == 1
    again = httpx.post(
        hook["ingest_url"], content=b"{}", headers={"X-Delivery-Id": "gone"}, timeout=60
    )
    assert again.json()["created"] == 0
    assert _scalar(dsn, "SELECT count(*) FROM events") == 1
    assert _scalar(dsn, "SELECT count(*) FROM todos") == 1


def test_a_secret_the_key_cannot_open_is_an_internal_error_that_names_nothing(
    world: Any, module_dsn: str
) -> None:
    """A webhook whose signing secret was sealed under another key (the key changed since):
    its deliveries fail with the fixed 500 body, and the cause (which setting to look at)
    goes to the operator's log, never to the producer."""
    from switchboard.secrets_box import SecretBox

    srv, w = world
    hook = w.webhook("owner", "github")
    with psycopg.connect(module_dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE endpoint_webhooks SET signing_secret_enc = %s WHERE id = %s",
            (SecretBox("another-key-0123456789").seal("whsec_x"), hook["webhook_id"]),
        )
    raw = b'{"action": "opened"}'
    resp = _post(hook["ingest_url"], "github", raw, hook["signing_secret"], event="issues")
    assert resp.status_code == 500
    assert resp.json() == {"error": "internal error", "code": "internal"}
    assert "request failed: a stored signing secret cannot be decrypted" in srv.log.read_text()
