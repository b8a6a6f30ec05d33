"""Event retention over a real database: expired events go in batches, their todos keep
their snapshot (claimable when pending), once claims stay, pending events wait, a webhook's
own ``events_days`` wins over ``[retention]``, and ``events prune`` plans what it applies."""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import json
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sbtest import CLI, make_env
from switchboard_gitea import GiteaSource

from switchboard.errors import InvalidArgument, RuleValidationError
from switchboard.routing.workorder import once_key
from switchboard.runtime import Runtime
from switchboard.service import identity, packs, retention, rules, todos, webhooks
from switchboard.service.ingest import IngestReply, ingest
from switchboard.sources import Headers
from switchboard.store.retention import PRUNE_LOCK

CONFIG = "[retention]\nevents_days = 30\nbatch_size = 10\n"

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
OPENED = json.loads((FIXTURES / "gitea_issues_opened.json").read_bytes())
PARAMS = {"trusted_repos": ["ops/backup"], "trusted_actors": ["mara"]}
SUBJECT = "gitea:ops/backup#57"

_tenant = itertools.count()


class Tenant:
    """A router endpoint owning a Gitea webhook with the ``lanes`` pack, a pool per lane."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.human = f"ret{next(_tenant)}-{uuid.uuid4().hex[:6]}"
        self.pools: dict[str, str] = {}

    async def build(self) -> Tenant:
        await identity.add_human(self.rt, self.human)
        router = await self.vend("router", ["inbox"], ["inbox"])
        hook = await webhooks.create_webhook(
            self.rt, await self.rt.store.get_endpoint(router), "gitea", "inbox"
        )
        self.webhook_id = str(hook["webhook_id"])
        self.token = hook["ingest_url"].rsplit("/", 1)[1]
        self.secret = hook["signing_secret"].encode()
        for queue in ("lane-s", "lane-m", "lane-l", "lane-vision", "triage", "hold"):
            self.pools[queue] = await self.vend(queue, [queue], [])
            await webhooks.add_route(self.rt, None, self.webhook_id, self.pools[queue])
        await packs.install_pack(self.rt, None, self.webhook_id, "lanes", PARAMS)
        return self

    async def vend(self, name: str, queues: list[str], webhook_queues: list[str]) -> str:
        ep = await identity.vend_endpoint(
            self.rt,
            owner=self.human,
            name=f"{self.human}-{name}",
            queues=queues,
            webhook_queues=webhook_queues,
            source_types=["gitea"],
            webhook_max=1,
        )
        return str(ep["endpoint_id"])

    async def deliver(self, doc: dict[str, Any], *, kind: str = "issues") -> IngestReply:
        body = json.dumps(doc).encode()
        headers = GiteaSource().sign(body, self.secret, kind, delivery_id=str(uuid.uuid4()))
        reply = await ingest(self.rt, self.token, Headers(headers), body, "application/json")
        assert reply.status == 202, reply.body
        return reply

    async def claim(self, pool: str) -> dict[str, Any]:
        caller = await self.rt.store.get_endpoint(self.pools[pool])
        got = await todos.claim_next(self.rt, caller, owner=self.pools[pool])
        assert got["empty"] is False
        todo: dict[str, Any] = got["todo"]
        return todo


def issue(number: int = 57, *labels: str, action: str = "label_updated") -> dict[str, Any]:
    doc = json.loads(json.dumps(OPENED))
    doc["action"], doc["number"] = action, number
    doc["issue"]["number"] = number
    doc["issue"]["labels"] = [{"id": i, "name": n} for i, n in enumerate(labels, 1)]
    return doc


def sql(dsn: str, query: str, *args: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, args)
        return list(cur.fetchall()) if cur.description else []


def age(dsn: str, webhook_id: str, days: int) -> None:
    """Make every event of the webhook ``days`` older (test data: a month cannot be waited)."""
    sql(
        dsn,
        "UPDATE events SET received_at = received_at - make_interval(days => %s)"
        " WHERE webhook_id = %s",
        days,
        webhook_id,
    )


def event_count(dsn: str, webhook_id: str) -> int:
    return int(sql(dsn, "SELECT count(*) FROM events WHERE webhook_id = %s", webhook_id)[0][0])


async def prune_configured(rt: Runtime) -> tuple[int, int]:
    """What the background job would do now: (the plan's count, the prune's count)."""
    cutoffs = await retention.configured_cutoffs(rt)
    planned = await retention.plan(rt, cutoffs)
    done = await retention.prune(rt, cutoffs, wait=False)
    assert done["cut_short"] is False
    return int(planned["events"]), int(done["deleted"])


async def test_expired_events_go_and_their_todos_and_once_claims_stay(
    runtime: Runtime, dsn: str
) -> None:
    t = await Tenant(runtime).build()
    opened = await t.deliver(issue(action="opened"))
    [triage_todo] = opened.body["todos"]
    sized = await t.deliver(issue(57, "bug", "size:m"), kind="issue_label")
    [lane_todo] = sized.body["todos"]
    assert lane_todo["queue"] == "lane-m"
    # More than one batch (batch_size = 10) of expired events.
    for n in range(100, 123):
        await t.deliver(issue(n, action="opened"))
    before = {
        tid: sql(dsn, "SELECT title, payload FROM todos WHERE id = %s", tid)[0]
        for tid in (triage_todo["id"], lane_todo["id"])
    }
    age(dsn, t.webhook_id, 40)
    fresh = await t.deliver(issue(58, action="opened"))

    planned, deleted = await prune_configured(runtime)
    assert planned == deleted == 25
    # Only the fresh event is left.
    [(fresh_todo,)] = sql(
        dsn,
        "SELECT t.id::text FROM events e JOIN todos t ON t.event_id = e.id WHERE e.webhook_id = %s",
        t.webhook_id,
    )
    assert event_count(dsn, t.webhook_id) == 1 and fresh_todo == fresh.body["todos"][0]["id"]
    # The todos keep their snapshot; only their link to the event is gone.
    for tid, (title, payload) in before.items():
        assert sql(dsn, "SELECT title, payload, event_id FROM todos WHERE id = %s", tid) == [
            (title, payload, None)
        ]
    assert before[triage_todo["id"]][0]  # a real title, not an empty one
    # A pending todo of a pruned event is still claimable, with its title and payload.
    claimed = await t.claim("triage")
    assert claimed["todo_id"] == triage_todo["id"]
    assert claimed["title"] == before[triage_todo["id"]][0]
    # The once claim stays: a later delivery about the same subject in the same lane is a
    # repeat, as it was before the claiming event went.
    assert sql(
        dsn,
        "SELECT once_key FROM routing_once WHERE webhook_id = %s AND once_key = %s",
        t.webhook_id,
        once_key(SUBJECT, "lane-m"),
    )
    again = await t.deliver(issue(57, "bug", "size:m", "docs"), kind="issue_label")
    assert again.body["repeat"] is True and again.body["todos"] == []
    # Nothing left to prune: a second run deletes nothing.
    assert await prune_configured(runtime) == (0, 0)


async def test_a_webhooks_own_events_days_wins_and_zero_inherits(
    runtime: Runtime, dsn: str
) -> None:
    a, b = await Tenant(runtime).build(), await Tenant(runtime).build()
    saved = await rules.set_policy(runtime, None, a.webhook_id, events_days=7)
    assert saved["events_days"] == 7
    for t in (a, b):
        await t.deliver(issue(action="opened"))
        age(dsn, t.webhook_id, 10)
    # a keeps 7 days, b the server's 30.
    assert await prune_configured(runtime) == (1, 1)
    assert (event_count(dsn, a.webhook_id), event_count(dsn, b.webhook_id)) == (0, 1)

    # b keeps 60 days: at 40 days old its event stays, though the server's 30 have passed.
    await rules.set_policy(runtime, None, b.webhook_id, events_days=60)
    age(dsn, b.webhook_id, 30)
    assert await prune_configured(runtime) == (0, 0)
    assert event_count(dsn, b.webhook_id) == 1
    # 0 inherits the server's again (stored as no override at all).
    reset = await rules.set_policy(runtime, None, b.webhook_id, events_days=0)
    assert "events_days" not in reset
    assert await prune_configured(runtime) == (1, 1)
    assert event_count(dsn, b.webhook_id) == 0

    # Bad values are refused naming the field.
    for bad in (-1, 36501, True, False, "7", 1.5, 0.0):
        with pytest.raises(RuleValidationError, match="events_days"):
            await rules.set_policy(runtime, None, a.webhook_id, events_days=bad)
    with pytest.raises(InvalidArgument, match="events_days"):
        await rules.set_policy(runtime, None, a.webhook_id)


async def test_pending_events_wait_for_their_decision_and_held_ones_go(
    runtime: Runtime, dsn: str
) -> None:
    t = await Tenant(runtime).build()
    for n in (1, 2):
        await t.deliver(issue(n, action="opened"))
    age(dsn, t.webhook_id, 40)
    (pending,), (held,) = sql(
        dsn, "SELECT id FROM events WHERE webhook_id = %s ORDER BY received_at", t.webhook_id
    )
    # Test data: a deferred stage's undecided event, and a faulted one held.
    sql(dsn, "UPDATE events SET disposition = 'pending' WHERE id = %s", pending)
    sql(dsn, "UPDATE events SET disposition = 'held' WHERE id = %s", held)
    assert await prune_configured(runtime) == (1, 1)
    assert sql(dsn, "SELECT id FROM events WHERE webhook_id = %s", t.webhook_id) == [(pending,)]


async def test_one_batch_at_a_time_across_servers(runtime: Runtime, dsn: str) -> None:
    """The background job leaves a run to whoever holds the prune lock (another server)."""
    t = await Tenant(runtime).build()
    await t.deliver(issue(action="opened"))
    age(dsn, t.webhook_id, 40)
    cutoffs = await retention.configured_cutoffs(runtime)
    with psycopg.connect(dsn, autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(%s)", (PRUNE_LOCK,))
        done = await retention.prune(runtime, cutoffs, wait=False)
        assert done == {"webhooks": [], "deleted": 0, "cut_short": True}
    assert event_count(dsn, t.webhook_id) == 1
    assert (await retention.prune(runtime, cutoffs, wait=False))["deleted"] == 1


async def test_events_prune_cli_plans_what_it_applies(
    runtime: Runtime, dsn: str, cli: CLI, tmp_path: Path
) -> None:
    a, b = await Tenant(runtime).build(), await Tenant(runtime).build()
    for n in range(3):
        await a.deliver(issue(n, action="opened"))
    await b.deliver(issue(action="opened"))
    age(dsn, a.webhook_id, 400)
    age(dsn, b.webhook_id, 400)
    await a.deliver(issue(9, action="opened"))  # today's: after the cut

    # The real script: a year back cuts the aged events of both webhooks, not today's.
    before = (dt.datetime.now(dt.UTC) - dt.timedelta(days=1)).isoformat()
    assert cli.json("events", "prune", "--before", before, "--plan", "--json")["events"] == 4
    assert cli.json("events", "prune", "--before", "2000-01-01", "--plan")["events"] == 0
    fast = cli.fast()
    plan = fast.json("events", "prune", "--before", before, "--webhook", a.webhook_id, "--plan")
    [row] = plan["webhooks"]
    assert (row["webhook_id"], row["events"], plan["events"]) == (a.webhook_id, 3, 3)
    assert row["oldest"] <= row["newest"] < before
    table = fast.run("events", "prune", "--before", before, "--plan", "--table").stdout
    assert "4 would be deleted" in " ".join(table.split()), table
    # Plan changes nothing; apply deletes exactly what it planned, of that webhook only.
    assert event_count(dsn, a.webhook_id) == 4
    done = fast.json("events", "prune", "--before", before, "--webhook", a.webhook_id, "--apply")
    assert done["deleted"] == plan["events"] == 3
    assert (event_count(dsn, a.webhook_id), event_count(dsn, b.webhook_id)) == (1, 1)
    # Every webhook: b's now, also once b is deleted (its events kept, listed as deleted).
    every = fast.json("events", "prune", "--before", before, "--plan")
    assert [(r["webhook_id"], r["events"]) for r in every["webhooks"]] == [(b.webhook_id, 1)]
    await webhooks.delete_webhook(runtime, None, b.webhook_id)
    every = fast.json("events", "prune", "--before", before, "--plan")
    assert [(r["scope"], r["events"]) for r in every["webhooks"]] == [("detached", 1)]
    one = fast.json("events", "prune", "--before", before, "--webhook", b.webhook_id, "--plan")
    assert [(r["webhook_id"], r["scope"], r["events"]) for r in one["webhooks"]] == [
        (b.webhook_id, "deleted", 1)
    ]
    done = fast.json("events", "prune", "--before", before, "--webhook", b.webhook_id, "--apply")
    assert done["deleted"] == 1
    assert sql(dsn, "SELECT count(*) FROM events WHERE deleted_webhook_id = %s", b.webhook_id) == [
        (0,)
    ]
    # A table for a person; mistakes are refused naming the flag.
    table = fast.run("events", "prune", "--before", before, "--plan", "--table").stdout
    assert "0 would be deleted" in " ".join(table.split()) and "EVENTS" in table
    bad = fast.run("events", "prune", "--before", "last week", "--plan", check=False)
    assert bad.returncode == 2 and "--before" in bad.stderr
    neither = fast.run("events", "prune", "--before", before, check=False)
    assert neither.returncode == 2 and "--plan" in neither.stderr
    unknown = fast.run(
        "events",
        "prune",
        "--before",
        before,
        "--webhook",
        str(uuid.uuid4()),
        "--plan",
        check=False,
    )
    assert unknown.returncode == 1 and "not found" in unknown.stderr


def test_a_bad_retention_key_stops_serve_naming_it(tmp_path: Path, dsn: str) -> None:
    for toml, key in (
        ('[retention]\nevents_days = "30"\n', "retention.events_days"),
        ("[retention]\nevents_days = 0\n", "retention.events_days"),
        ("[retention]\nevent_days = 30\n", "retention.event_days: unknown key"),
        ("[retention]\ninterval_s = 0\n", "retention.interval_s"),
    ):
        config = tmp_path / "switchboard.toml"
        config.write_text(toml)
        proc = (
            CLI(make_env(dsn, tmp_path / "data"))
            .fast()
            .run("--config", str(config), "serve", check=False)
        )
        assert proc.returncode == 2, (toml, proc.stderr)
        assert f"config file {config}: {key}" in proc.stderr, proc.stderr


async def test_every_serve_prunes_in_the_background_and_stops_cleanly(
    runtime: Runtime, dsn: str, server_factory: Any, tmp_path: Path
) -> None:
    t = await Tenant(runtime).build()
    opened = await t.deliver(issue(action="opened"))
    for n in range(100, 112):
        await t.deliver(issue(n, action="opened"))
    age(dsn, t.webhook_id, 40)
    await t.deliver(issue(58, action="opened"))
    config = tmp_path / "serve.toml"
    config.write_text("[retention]\nevents_days = 30\ninterval_s = 0.2\nbatch_size = 10\n")
    srv = server_factory(dsn, config=config)
    deadline = asyncio.get_running_loop().time() + 20
    while event_count(dsn, t.webhook_id) > 1:
        assert asyncio.get_running_loop().time() < deadline, srv.log.read_text()
        await asyncio.sleep(0.1)
    # The todos stayed.
    [todo_id] = [x["id"] for x in opened.body["todos"]]
    assert sql(dsn, "SELECT state, event_id FROM todos WHERE id = %s", todo_id) == [
        ("pending", None)
    ]
    await asyncio.sleep(0.5)  # a run or two more: one log line each
    proc = srv.proc
    srv.stop()  # SIGTERM
    assert proc.returncode == 0
    log = srv.log.read_text()
    runs = [line for line in log.splitlines() if "retention: pruned" in line]
    assert any("pruned 13 expired event(s)" in line for line in runs), log
    assert "Traceback" not in log
