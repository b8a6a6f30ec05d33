"""Work orders and difficulty lanes (ADR-0025) on the live path: the receiver's ingest, in
process, over a real database, with the ``lanes`` pack installed on a Gitea webhook."""

from __future__ import annotations

import itertools
import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from switchboard_gitea import GiteaSource

from switchboard.errors import InvalidArgument, NotFound, RuleValidationError
from switchboard.routing.workorder import WORK_ORDER_AUTHORITY, once_key
from switchboard.runtime import Runtime
from switchboard.service import identity, once, packs, rules, todos, webhooks
from switchboard.service.ingest import IngestReply, ingest
from switchboard.sources import Headers

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
OPENED = json.loads((FIXTURES / "gitea_issues_opened.json").read_bytes())
LANES = ("lane-s", "lane-m", "lane-l", "lane-vision", "triage", "hold")
PARAMS = {"trusted_repos": ["ops/backup"], "trusted_actors": ["mara"]}
SUBJECT = "gitea:ops/backup#57"

_tenant = itertools.count()


class Lanes:
    """One tenant: a router endpoint owning a Gitea webhook, routed to one pool per lane."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.human = f"lanes{next(_tenant)}-{uuid.uuid4().hex[:6]}"
        self.pools: dict[str, str] = {}

    async def build(self, lanes: tuple[str, ...] = LANES) -> Lanes:
        await identity.add_human(self.rt, self.human)
        router = await self.vend("router", ["inbox"], ["inbox"])  # scoped to no lane
        hook = await webhooks.create_webhook(
            self.rt, await self.rt.store.get_endpoint(router), "gitea", "inbox"
        )
        self.webhook_id = str(hook["webhook_id"])
        self.token = hook["ingest_url"].rsplit("/", 1)[1]
        self.secret = hook["signing_secret"].encode()
        for queue in lanes:
            await self.pool(queue, queue)
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

    async def pool(self, name: str, queue: str) -> str:
        """A pool endpoint scoped to exactly ``queue``, routed from the webhook."""
        self.pools[name] = await self.vend(name, [queue], [])
        await webhooks.add_route(self.rt, None, self.webhook_id, self.pools[name])
        return self.pools[name]

    async def deliver(
        self, doc: dict[str, Any], *, kind: str = "issues", delivery: str | None = None
    ) -> IngestReply:
        body = json.dumps(doc).encode()
        headers = GiteaSource().sign(
            body, self.secret, kind, delivery_id=delivery or str(uuid.uuid4())
        )
        return await ingest(self.rt, self.token, Headers(headers), body, "application/json")

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


def where(reply: IngestReply) -> list[tuple[str, str, bool]]:
    assert reply.status == 202, reply.body
    return [(t["endpoint_id"], t["queue"], t["created"]) for t in reply.body["todos"]]


def rows(dsn: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return list(conn.execute(sql, args).fetchall())


async def test_lanes_lifecycle(module_runtime: Runtime, module_dsn: str) -> None:
    t = await Lanes(module_runtime).build()
    await packs.install_pack(t.rt, None, t.webhook_id, "lanes", PARAMS)
    triage, lane_m, lane_l = t.pools["triage"], t.pools["lane-m"], t.pools["lane-l"]

    # 1. Opened, unsized: triage.
    opened = await t.deliver(issue(action="opened"))
    assert where(opened) == [(triage, "triage", True)]

    # 2. A size label: the lane's pool only, with a work order.
    sized_id = str(uuid.uuid4())
    sized = await t.deliver(issue(57, "bug", "size:m"), kind="issue_label", delivery=sized_id)
    assert where(sized) == [(lane_m, "lane-m", True)]
    todo = await t.claim("lane-m")
    assert todo["todo_id"] == sized.body["todos"][0]["id"]
    order = todo["work_order"]
    assert order == {
        "version": 1,
        "lane": "lane-m",
        "source": "gitea",
        "webhook_id": t.webhook_id,
        "trust_mode": "signed",
        "verified": True,
        "authorized_by": {
            "stage": "rule",
            "rule_id": "lane-m",
            "rule_name": "size:m label or lane:m tag",
        },
        "subject": order["subject"],
        "authority": WORK_ORDER_AUTHORITY,
    }
    assert order["subject"]["key"] == SUBJECT and order["subject"]["number"] == 57
    assert order["subject"]["labels"] == ["bug", "size:m"]
    assert todo["routing_trace"]["once"] == "claimed"
    assert todo["routing_trace"]["once_key"] == once_key(SUBJECT, "lane-m")

    # 3. A relabel (a fresh delivery about the same issue, same lane): a repeat, no todo.
    relabel_id = str(uuid.uuid4())
    relabel = await t.deliver(
        issue(57, "bug", "size:m", "docs"), kind="issue_label", delivery=relabel_id
    )
    assert relabel.body == {
        "todos": [],
        "created": 0,
        "repeat": True,
        "verified": True,
        "trust_mode": "signed",
    }
    [(disposition, trace)] = rows(
        module_dsn,
        "SELECT disposition, routing_trace FROM events WHERE webhook_id = %s AND external_id = %s",
        t.webhook_id,
        f"{t.webhook_id}:{relabel_id}",
    )
    assert disposition == "repeat"
    assert trace["once"] == "repeat" and trace["once_key"] == once_key(SUBJECT, "lane-m")
    assert trace["rule_id"] == "lane-m"

    # 4. A redelivery of the sized event: the same todo; of the repeat: a repeat again.
    again = await t.deliver(issue(57, "bug", "size:m"), kind="issue_label", delivery=sized_id)
    assert where(again) == [(lane_m, "lane-m", False)]
    assert again.body["todos"][0]["id"] == sized.body["todos"][0]["id"]
    assert (
        await t.deliver(issue(57, "bug", "size:m", "docs"), kind="issue_label", delivery=relabel_id)
    ).body["repeat"] is True

    # 5. Retention deletes the claiming event: the claim stays (no foreign key).
    with psycopg.connect(module_dsn) as conn:
        conn.execute(
            "DELETE FROM events WHERE webhook_id = %s AND external_id = %s",
            (t.webhook_id, f"{t.webhook_id}:{sized_id}"),
        )
    assert (await t.deliver(issue(57, "size:m"), kind="issue_label")).body["repeat"] is True

    # 6. A re-size to another lane routes again.
    resized = await t.deliver(issue(57, "bug", "size:l"), kind="issue_label")
    assert where(resized) == [(lane_l, "lane-l", True)]
    claims = rows(
        module_dsn,
        "SELECT once_key FROM routing_once WHERE webhook_id = %s ORDER BY created_at",
        t.webhook_id,
    )
    assert [k for (k,) in claims] == [once_key(SUBJECT, q) for q in ("triage", "lane-m", "lane-l")]
    # Every todo went to exactly one pool: never the router, never a second pool.
    made = rows(
        module_dsn,
        "SELECT t.endpoint_id::text, t.queue FROM todos t JOIN events e"
        " ON e.id = t.event_id WHERE e.webhook_id = %s ORDER BY t.created_at",
        t.webhook_id,
    )
    assert made == [(triage, "triage"), (lane_l, "lane-l")]  # the lane-m event was deleted


async def test_two_endpoints_on_one_lane_always_get_the_first_in_target_order(
    module_runtime: Runtime, module_dsn: str
) -> None:
    t = await Lanes(module_runtime).build(lanes=())
    first = await t.pool("m-first", "lane-m")
    await t.pool("m-second", "lane-m")
    await t.pool("triage", "triage")
    for lane in ("lane-s", "lane-l", "lane-vision", "hold"):
        await t.pool(lane, lane)
    await packs.install_pack(t.rt, None, t.webhook_id, "lanes", PARAMS)
    for number in (101, 102, 103, 104):
        reply = await t.deliver(issue(number, "size:m"), kind="issue_label")
        assert where(reply) == [(first, "lane-m", True)]


async def test_exclusive_needs_a_drainer_at_save_and_at_delivery(
    module_runtime: Runtime, module_dsn: str
) -> None:
    t = await Lanes(module_runtime).build(lanes=("lane-m", "triage"))
    with pytest.raises(RuleValidationError) as info:  # no hold endpoint: refused at save
        await packs.install_pack(t.rt, None, t.webhook_id, "lanes", PARAMS)
    assert info.value.code == "not_granted" and info.value.rule_id == "hold"
    rule = {
        "id": "m",
        "expr": "true",
        "action": {"queue": "lane-m", "exclusive": True, "work_order": True},
    }
    await rules.set_rules(t.rt, None, t.webhook_id, [rule], {"queue": "inbox", "exclusive": True})
    # The lane's only endpoint is revoked after the save: the rule no longer reaches anyone.
    await identity.revoke_endpoint(t.rt, t.pools["lane-m"])
    reply = await t.deliver(issue(58, "size:m"), kind="issue_label")
    [(trace,)] = rows(
        module_dsn, "SELECT routing_trace FROM events WHERE webhook_id = %s", t.webhook_id
    )
    assert trace["stage"] == "default" and trace["cause"] == "rule_not_granted"
    assert trace["rule_id"] == "m"
    router = rows(
        module_dsn, "SELECT endpoint_id::text FROM endpoint_webhooks WHERE id = %s", t.webhook_id
    )[0][0]
    assert where(reply) == [(router, "inbox", True)]  # the exclusive default: the router


async def test_the_lifecycle_over_http(module_runtime: Runtime, module_server: Any) -> None:
    """The same path through a real ``switchboard serve``: what a producer and a pool see."""
    t = await Lanes(module_runtime).build()
    await packs.install_pack(t.rt, None, t.webhook_id, "lanes", PARAMS)
    url = f"{module_server.base_url}/webhooks/w/{t.token}"

    async with httpx.AsyncClient(timeout=30) as client:

        async def post(
            doc: dict[str, Any], kind: str, delivery: str | None = None
        ) -> httpx.Response:
            body = json.dumps(doc).encode()
            headers = {
                "Content-Type": "application/json",
                **GiteaSource().sign(
                    body, t.secret, kind, delivery_id=delivery or str(uuid.uuid4())
                ),
            }
            return await client.post(url, content=body, headers=headers)

        def targets(resp: httpx.Response) -> list[tuple[str, str, bool]]:
            assert resp.status_code == 202, resp.text
            return [(x["endpoint_id"], x["queue"], x["created"]) for x in resp.json()["todos"]]

        opened = await post(issue(60, action="opened"), "issues")
        assert targets(opened) == [(t.pools["triage"], "triage", True)]
        sized_id = str(uuid.uuid4())
        sized = await post(issue(60, "size:s"), "issue_label", sized_id)
        assert targets(sized) == [(t.pools["lane-s"], "lane-s", True)]
        relabel = await post(issue(60, "size:s", "docs"), "issue_label")
        assert relabel.status_code == 202
        assert relabel.json() == {
            "todos": [],
            "created": 0,
            "repeat": True,
            "verified": True,
            "trust_mode": "signed",
        }
        again = await post(issue(60, "size:s"), "issue_label", sized_id)
        assert targets(again) == [(t.pools["lane-s"], "lane-s", False)]
        assert again.json()["todos"][0]["id"] == sized.json()["todos"][0]["id"]
    todo = await t.claim("lane-s")
    assert todo["todo_id"] == sized.json()["todos"][0]["id"]
    assert todo["work_order"]["lane"] == "lane-s"
    assert todo["work_order"]["authority"] == WORK_ORDER_AUTHORITY


def sample(doc: dict[str, Any], kind: str = "issue_label") -> dict[str, Any]:
    """``test_rules`` arguments for a sample of ``doc`` as Gitea sends it."""
    body = json.dumps(doc).encode()
    headers = GiteaSource().sign(body, b"unused", kind, delivery_id=str(uuid.uuid4()))
    return {"payload": body.decode(), "headers": headers}


async def test_a_released_claim_lets_the_next_delivery_claim_again(
    module_runtime: Runtime, module_dsn: str
) -> None:
    t = await Lanes(module_runtime).build()
    await packs.install_pack(t.rt, None, t.webhook_id, "lanes", PARAMS)
    router = await t.rt.store.get_endpoint(
        rows(module_dsn, "SELECT endpoint_id::text FROM endpoint_webhooks WHERE id = %s",
             t.webhook_id)[0][0]
    )  # fmt: skip
    key = once_key(SUBJECT, "lane-m")
    # A dry run before any delivery: the claim would be taken, with the work order.
    dry = await rules.test_rules(t.rt, router, t.webhook_id, **sample(issue(57, "size:m")))
    assert dry["once"]["state"] == "claimed" and dry["once"]["held_by"] is None
    assert dry["once"]["once_key"] == key and dry["once"]["subject"] == SUBJECT
    assert dry["trace"]["once"] == "claimed" and dry["trace"]["once_key"] == key
    assert dry["work_order"]["lane"] == "lane-m"
    assert dry["work_order"]["subject"]["key"] == SUBJECT
    assert dry["work_order"]["authority"] == WORK_ORDER_AUTHORITY

    sized = await t.deliver(issue(57, "size:m"), kind="issue_label")
    assert where(sized) == [(t.pools["lane-m"], "lane-m", True)]
    relabel = issue(57, "size:m", "docs")
    assert (await t.deliver(relabel, kind="issue_label")).body["repeat"] is True
    # The dry run now says repeat, naming the claim's holder; live stored the same trace.
    dry = await rules.test_rules(t.rt, router, t.webhook_id, **sample(relabel))
    [(holder,)] = rows(
        module_dsn,
        "SELECT event_id::text FROM routing_once WHERE webhook_id = %s AND once_key = %s",
        t.webhook_id,
        key,
    )
    assert dry["once"]["state"] == "repeat" and dry["once"]["held_by"] == holder
    assert dry["trace"]["once"] == "repeat"

    # The owner releases it: recorded with who; the next relabel claims again, a new todo.
    released = await once.release_once_claim(t.rt, router, "lane-m", SUBJECT)
    assert [r["event_id"] for r in released["released"]] == [holder]
    assert released["released_by"] == str(router["id"])
    assert rows(
        module_dsn,
        "SELECT queue, subject, event_id::text, released_by FROM routing_once_releases"
        " WHERE webhook_id = %s",
        t.webhook_id,
    ) == [("lane-m", SUBJECT, holder, str(router["id"]))]
    again = await t.deliver(issue(57, "size:m", "docs", "v2"), kind="issue_label")
    assert where(again) == [(t.pools["lane-m"], "lane-m", True)]
    assert (await t.deliver(issue(57, "size:m", "v3"), kind="issue_label")).body["repeat"] is True
    # Nothing to release: not found, naming the subject and lane; another human's: the same.
    with pytest.raises(NotFound, match="lane-x"):
        await once.release_once_claim(t.rt, router, "lane-x", SUBJECT)
    stranger = await Lanes(module_runtime).build(lanes=())
    other = await t.rt.store.get_endpoint(await stranger.vend("nosy", ["inbox"], ["inbox"]))
    with pytest.raises(NotFound):
        await once.release_once_claim(t.rt, other, "lane-m", SUBJECT, t.webhook_id)
    with pytest.raises(NotFound):
        await once.release_once_claim(t.rt, other, "lane-m", SUBJECT)


async def test_a_lanes_ttl_lets_a_claim_expire(module_runtime: Runtime, module_dsn: str) -> None:
    t = await Lanes(module_runtime).build()
    await packs.install_pack(t.rt, None, t.webhook_id, "lanes", PARAMS)
    saved = await rules.set_policy(t.rt, None, t.webhook_id, lanes={"lane-m": {"once_ttl_s": 3600}})
    assert saved["lanes"] == {"lane-m": {"once_ttl_s": 3600}}
    # A rules save keeps the lanes, as it keeps params.
    kept = await rules.list_rules(t.rt, None, t.webhook_id)
    await rules.set_rules(t.rt, None, t.webhook_id, kept["rules"], kept["default_action"])
    assert (await rules.list_rules(t.rt, None, t.webhook_id))["lanes"] == saved["lanes"]

    assert where(await t.deliver(issue(57, "size:m"), kind="issue_label"))[0][1] == "lane-m"
    [(left,)] = rows(
        module_dsn,
        "SELECT extract(epoch FROM expires_at - created_at) FROM routing_once"
        " WHERE webhook_id = %s AND once_key = %s",
        t.webhook_id,
        once_key(SUBJECT, "lane-m"),
    )
    assert 3599 <= float(left) <= 3601
    assert (await t.deliver(issue(57, "size:m", "a"), kind="issue_label")).body["repeat"] is True
    # The hour passes (the clock moved by hand: the claim's expiry, not the test's wait).
    with psycopg.connect(module_dsn) as conn:
        conn.execute(
            "UPDATE routing_once SET expires_at = now() - interval '1 second'"
            " WHERE webhook_id = %s",
            (t.webhook_id,),
        )
    dry = await rules.test_rules(t.rt, None, t.webhook_id, **sample(issue(57, "size:m", "b")))
    assert dry["once"]["state"] == "claimed" and dry["once"]["ttl_s"] == 3600
    again = await t.deliver(issue(57, "size:m", "b"), kind="issue_label")
    assert where(again) == [(t.pools["lane-m"], "lane-m", True)]
    assert (await t.deliver(issue(57, "size:m", "c"), kind="issue_label")).body["repeat"] is True
    # Lanes without a TTL (triage) never expire; a lane's TTL is checked at save.
    for lanes, code, says in (
        ({"lane-m": {"once_ttl_s": 0}}, "invalid_rule", "lanes.lane-m.once_ttl_s"),
        ({"lane-m": {"ttl": 5}}, "invalid_rule", "unknown field 'ttl'"),
        ({"nowhere": {"once_ttl_s": 5}}, "not_granted", "lanes.nowhere"),
    ):
        with pytest.raises(RuleValidationError) as info:
            await rules.set_policy(t.rt, None, t.webhook_id, lanes=lanes)
        assert info.value.code == code and says in str(info.value), str(info.value)
    cleared = await rules.set_policy(t.rt, None, t.webhook_id, lanes=None, on_fault="hold")
    assert "lanes" not in cleared and cleared["on_fault"] == "hold"


async def test_release_and_policy_arguments_are_checked_in_their_own_names(
    module_runtime: Runtime,
) -> None:
    t = await Lanes(module_runtime).build(lanes=())
    caller = await t.rt.store.get_endpoint(await t.vend("arg", ["inbox"], ["inbox"]))
    for lane, subject, field in (
        ("", SUBJECT, "lane"),
        ("l" * 65, SUBJECT, "lane"),
        (["lane-m"], SUBJECT, "lane"),
        ("lane-m", "", "subject"),
        ("lane-m", "s" * 1001, "subject"),
        ("lane-m", {"key": SUBJECT}, "subject"),
    ):
        with pytest.raises(InvalidArgument, match=rf"^{field}: a non-empty string of at most"):
            await once.release_once_claim(t.rt, caller, lane, subject)
    with pytest.raises(InvalidArgument, match="webhook_id: required"):
        await once.release_once_claim(t.rt, None, "lane-m", SUBJECT)
    with pytest.raises(InvalidArgument, match="give on_fault or lanes"):
        await rules.set_policy(t.rt, None, t.webhook_id)
    for lanes, says in (
        ("lane-m", "lanes must be an object"),
        ({"inbox": 5}, "lanes.inbox must be an object"),
        ({"inbox": {"once_ttl_s": True}}, "lanes.inbox.once_ttl_s"),
        ({"inbox": {"once_ttl_s": 31536001}}, "lanes.inbox.once_ttl_s"),
    ):
        with pytest.raises(RuleValidationError, match=says):
            await rules.set_policy(t.rt, None, t.webhook_id, lanes=lanes)
    with pytest.raises(RuleValidationError, match="on_fault"):
        await rules.set_policy(t.rt, None, t.webhook_id, on_fault="later")


ONCE_LANE = [
    {
        "id": "lane",
        "expr": "true",
        "action": {"queue": "lane-s", "exclusive": True, "once": True, "work_order": True},
    }
]


async def test_a_reroute_into_a_once_lane_claims_like_live_routing(runtime: Runtime) -> None:
    from switchboard.service.reroute import reroute_events

    t = await Lanes(runtime).build(("lane-s",))
    await rules.set_rules(t.rt, None, t.webhook_id, [{"expr": "true", "action": {"drop": True}}])
    first = await t.deliver(issue(57, "size:s"), kind="issue_label")
    second = await t.deliver(issue(57, "size:s", "bug"), kind="issue_label")
    assert first.body["dropped"] and second.body["dropped"]
    await rules.set_rules(t.rt, None, t.webhook_id, ONCE_LANE)
    key = once_key(SUBJECT, "lane-s")

    # the plan says what live routing would: one claims the subject, the other repeats
    plan = await reroute_events(t.rt, None, t.webhook_id, plan=True)
    states = sorted(e["once"]["state"] for e in plan["events"])
    assert plan["changed"] == 2 and states == ["claimed", "repeat"]
    assert plan["todos_planned"] == 1 and plan["repeat"] == 1
    assert all(e["once"]["once_key"] == key for e in plan["events"])

    done = await reroute_events(t.rt, None, t.webhook_id, plan=False)
    assert done["todos_created"] == 1 and done["repeat"] == 1
    [claimer] = [e for e in done["events"] if e["created"]]
    [repeat] = [e for e in done["events"] if not e["created"]]
    assert repeat["once"]["held_by"] == claimer["event_id"]
    todo = await t.claim("lane-s")
    assert todo["todo_id"] == claimer["created"][0]
    assert todo["work_order"]["lane"] == "lane-s"
    assert todo["work_order"]["subject"]["key"] == SUBJECT
    assert todo["work_order"]["authority"] == WORK_ORDER_AUTHORITY
    event = await t.rt.store.get_event(repeat["event_id"])
    assert event is not None and event["disposition"] == "dropped"  # kept: it was stored so
    [entry] = event["routing_trace"]["reroutes"]
    assert entry["once"] == "repeat" and entry["held_by"] == claimer["event_id"]
    claim = await t.rt.store.once_claim(t.webhook_id, key)
    assert claim is not None and str(claim["event_id"]) == claimer["event_id"]

    # nothing again; and a live delivery about the subject meets the claim as a repeat
    again = await reroute_events(t.rt, None, t.webhook_id, plan=False)
    assert again["todos_created"] == 0
    live = await t.deliver(issue(57, "size:s", "p1"), kind="issue_label")
    assert live.body["repeat"] is True


async def test_a_held_delivery_released_into_a_claimed_lane_is_a_repeat(runtime: Runtime) -> None:
    from switchboard.service.reroute import release_held

    t = await Lanes(runtime).build(("lane-s",))
    faulty = [{"id": "lane", "expr": 'error("not yet")', "action": {"queue": "lane-s"}}]
    await rules.save_config(
        t.rt, None, t.webhook_id, lambda c: {**c, "rules": faulty, "on_fault": "hold"}
    )
    held = await t.deliver(issue(57, "size:s"), kind="issue_label")
    assert held.body["held"] is True
    await rules.set_rules(t.rt, None, t.webhook_id, ONCE_LANE)
    live = await t.deliver(issue(57, "size:s", "bug"), kind="issue_label")
    assert [q for _e, q, _c in where(live)] == ["lane-s"]  # the live one claims the subject

    plan = await release_held(t.rt, None, t.webhook_id, plan=True)
    [item] = plan["events"]
    assert item["once"]["state"] == "repeat" and item["create"] == []
    done = await release_held(t.rt, None, t.webhook_id, plan=False)
    assert done["todos_created"] == 0 and done["repeat"] == 1
    event = await t.rt.store.get_event(item["event_id"])
    assert event is not None and event["disposition"] == "repeat"  # as live would store it
    assert event["routing_trace"]["reroutes"][0]["once"] == "repeat"
    again = await release_held(t.rt, None, t.webhook_id, plan=True)
    assert again["evaluated"] == 0  # no longer held
