"""The console's operator pages (issues 35-37): charts with axes from one aggregate, queues
with retry, the deliveries' deciding rule and todo title, envelopes, refusals, rule
versions with a diff, re-route and release with a plan first, and the Origin check behind
a trusted proxy. A real server and Chromium; the data seeded through the real ingest."""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from sbtest import CLI, Server
from sbworld import World, fixture_body, on_runtime
from switchboard_console import charts
from switchboard_console.guard import trusted_proxies

from switchboard.cli.send import build_request
from switchboard.errors import ConfigError
from switchboard.service import events as events_svc
from switchboard.service import reroute as reroute_svc
from switchboard.service import rules as rules_svc
from switchboard.service import todos as todos_svc
from switchboard.service import webhooks as webhooks_svc
from switchboard.service.ingest import ingest
from switchboard.sources import Headers

BOOM = '.payload.issue.title | ascii_downcase | startswith("zzz")'
PRS = '.kind == "pull_request"'
HELD, ISSUES, REFUSED = 3, 4, 2


@pytest.fixture(scope="module")
def seeded(module_server_factory: Any, module_dsn: str, tmp_path_factory: Any) -> dict[str, Any]:
    config = tmp_path_factory.mktemp("console-config") / "switchboard.toml"
    # loopback is the "proxy"; a todo dies at its first failure
    config.write_text(
        '[plugins.console]\ntrusted_proxies = ["127.0.0.1"]\n[todos]\nmax_attempts = 1\n'
    )
    srv: Server = module_server_factory(module_dsn, config=config)
    w = World(CLI(srv.env).fast(), prefix="p-", direct=True)
    w.human("olga")
    w.human("eve")
    w.endpoint("olga", "ops", queues="inbox,review,triage", webhook_queues="inbox,review,triage")
    w.endpoint("eve", "other")
    hook = w.webhook("ops", "github")
    theirs = w.webhook("other", "github")

    async def seed(rt: Any) -> dict[str, Any]:
        ops = await rt.store.get_endpoint(w.endpoints["ops"]["endpoint_id"])
        ids: dict[str, list[str]] = {"held": [], "issue": []}
        hid = hook["webhook_id"]

        async def send(body: bytes, event: str, secret: bytes, status: int = 202) -> None:
            data, headers = build_request(
                "github", body, secret, event, {"X-GitHub-Delivery": str(uuid.uuid4())}, False
            )
            token = hook["ingest_url"].rsplit("/", 1)[1]
            reply = await ingest(rt, token, Headers(headers), data, "application/json")
            assert reply.status == status, reply.body

        async def newest() -> str:
            row = await rt.store.db.fetchone(
                "SELECT id FROM events WHERE webhook_id = %s ORDER BY received_at DESC, id DESC"
                " LIMIT 1",
                (hid,),
            )
            return str(row["id"])

        secret = hook["signing_secret"].encode()
        # v1: "boom" faults on pull requests (they have no issue), and faults hold
        await rules_svc.set_rules(
            rt,
            None,
            hid,
            [
                {"id": "boom", "expr": BOOM, "action": {"queue": "triage"}},
                {"id": "prs", "expr": PRS, "action": {"queue": "inbox"}},
            ],
            on_fault="hold",
        )
        for i in range(HELD):
            body = fixture_body("github_pull_request_opened", lambda d, i=i: d.update(number=i))
            await send(body, "pull_request", secret)
            ids["held"].append(await newest())
        for i in range(ISSUES):
            body = fixture_body(
                "github_issues_opened", lambda d, i=i: d["issue"].update(number=100 + i)
            )
            await send(body, "issues", secret)
            ids["issue"].append(await newest())
        for _ in range(REFUSED):
            await send(
                fixture_body("github_issues_opened", lambda d: None), "issues", b"x" * 32, 401
            )
        # v2 by the endpoint: the fix (pull requests to review); v3 by the operator
        await rules_svc.set_rules(
            rt,
            ops,
            hid,
            [{"id": "prs", "expr": PRS, "action": {"queue": "review"}}],
            note="pull requests to review",
        )
        await rules_svc.set_policy(rt, None, hid, on_fault="hold", note="keep holding")
        # for the chart's hours: one issue came 5 h 10 min ago, one 30 h ago (out of it)
        for event, back in ((ids["issue"][2], "5 hours 10 minutes"), (ids["issue"][3], "30 hours")):
            async with rt.store.db.tx() as conn:
                await conn.execute(
                    "UPDATE events SET received_at = now() - %s::interval WHERE id = %s",
                    (back, event),
                )
        # the issues' inbox todos: one claimed, one dead
        got = await todos_svc.list_todos(rt, ops, queue="inbox")
        first, second = (t["id"] for t in got["todos"][:2])
        await todos_svc.claim(rt, ops, first, owner="worker-1", lease_ttl_seconds=600)
        await todos_svc.claim(rt, ops, second, owner="worker-2")
        await todos_svc.fail(rt, ops, second, owner="worker-2", result={"error": "boom"})
        return {"ids": ids, "claimed": first, "dead": second}

    seeded = on_runtime(srv.env, seed)
    return {
        "server": srv,
        "base": srv.base_url,
        "world": w,
        "hook": hook,
        "theirs": theirs,
        **seeded,
    }


def _token(s: dict[str, Any]) -> str:
    return str(s["world"].endpoints["ops"]["token"])


def _sign_in(page: Any, s: dict[str, Any]) -> None:
    page.goto("/console/signin")
    page.fill("#token", _token(s))
    page.click("form.signin button[type=submit]")
    page.wait_for_url("**/console/webhooks")


def _sql(s: dict[str, Any], sql: str, *params: Any) -> list[dict[str, Any]]:
    async def run(rt: Any) -> list[dict[str, Any]]:
        return list(await rt.store.db.fetchall(sql, params))

    return on_runtime(s["server"].env, run)


def _client(s: dict[str, Any], **kw: Any) -> httpx.Client:
    """Signed in over plain HTTP (``kw``: e.g. a transport from another local address)."""
    client = httpx.Client(base_url=s["server"].base_url, timeout=30, **kw)
    form = client.get("/console/signin")
    csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert csrf
    reply = client.post("/console/signin", data={"csrf": csrf[1], "token": _token(s)})
    assert reply.status_code == 303, reply.text
    return client


def _csrf(text: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', text)
    assert found, text[:300]
    return found[1]


# --- in Chromium ----------------------------------------------------------------------------


def test_charts_have_a_time_axis_a_scale_and_the_stored_counts(
    page: Any, seeded: Any, shots: Path
) -> None:
    hid = seeded["hook"]["webhook_id"]
    # per (hours ago, outcome), counted here from the stored rows (not by the console's SQL)
    rows = _sql(
        seeded,
        "SELECT disposition, routing_trace, extract(epoch FROM now() - received_at) AS age"
        " FROM events WHERE webhook_id = %s",
        hid,
    )
    want = Counter(
        (str(int(r["age"] // 3600) + 1), charts.outcome(r)) for r in rows if r["age"] < 24 * 3600
    )
    per_hour: Counter[str] = Counter()
    for (ago, _), n in want.items():
        per_hour[ago] += n
    # the seed moved one issue 5 h back and one 30 h back (out of the chart)
    assert {ago for ago, _ in want} == {"1", "6"} and sum(want.values()) == HELD + ISSUES - 1
    assert sum(n for (_, name), n in want.items() if name == "faulted") == HELD
    _sign_in(page, seeded)
    for path in ("/console/webhooks", f"/console/webhooks/{hid}"):
        page.goto(path)
        chart = page.locator("svg.chart").first
        ticks = chart.locator("text.tick-x").all_text_contents()
        assert ticks == ["−24 h", "−18 h", "−12 h", "−6 h", "now"], ticks
        scale = [int(t) for t in chart.locator("text.tick-y").all_text_contents()]
        top = int(chart.get_attribute("data-scale-max"))
        assert scale[0] == 0 and scale[-1] == top >= max(per_hour.values())
        assert chart.locator("line.axis-x").count() == 1 and chart.locator("line.axis-y").count()
        got: Counter[tuple[str, str]] = Counter()
        for name, _ in charts.OUTCOMES:
            bars = chart.locator(f"rect.bar-{name}")
            for i in range(bars.count()):
                ago = str(bars.nth(i).get_attribute("data-hours-ago"))
                got[ago, name] += int(bars.nth(i).get_attribute("data-n"))
        assert got == want, path
        totals = page.text_content("td.counts" if path.endswith("webhooks") else "dl.facts")
        assert f"{HELD} faulted" in totals and f"{ISSUES - 1} default" in totals
    page.screenshot(path=str(shots / "console-chart-axes.png"), full_page=True)


def test_queues_page_counts_and_retries_a_dead_todo(page: Any, seeded: Any, shots: Path) -> None:
    ep = seeded["world"].endpoints["ops"]["endpoint_id"]
    stored = {
        (r["queue"], r["state"]): r["n"]
        for r in _sql(
            seeded,
            "SELECT queue, state, count(*)::int AS n FROM todos WHERE endpoint_id = %s"
            " GROUP BY 1, 2",
            ep,
        )
    }
    _sign_in(page, seeded)
    page.click("#nav-queues")
    page.wait_for_url("**/console/queues")
    for queue in ("inbox", "review", "triage"):
        row = page.locator(f"tr.queue[data-queue='{queue}']")
        for state in ("pending", "claimed", "dead"):
            assert row.locator(f"td.{state}").text_content() == str(
                stored.get((queue, state), 0)
            ), (queue, state)
    inbox = page.locator("tr.queue[data-queue='inbox']")
    assert inbox.locator("td.dead").text_content() == "1"
    assert inbox.locator("td.oldest").text_content().endswith(("s", "min"))
    claimed = page.locator(f"tr.todo[data-todo='{seeded['claimed']}']")
    assert "worker-1" in claimed.locator("td.lease").text_content()
    assert "left" in claimed.locator("td.lease").text_content()
    dead = page.locator(f"tr.todo[data-todo='{seeded['dead']}']")
    assert dead.locator("td.state").text_content() == "dead"
    assert dead.locator("td.attempts").text_content() == "1"
    assert seeded["hook"]["webhook_id"][:8] in dead.text_content()
    assert dead.locator("td.title").text_content().strip()  # the todo's title
    assert page.locator("form.retry").count() == 1  # only dead todos have a retry
    page.screenshot(path=str(shots / "console-queues.png"), full_page=True)
    dead.locator("form.retry button").click()
    page.wait_for_url("**/console/queues?retried=*")
    assert seeded["dead"] in page.text_content("#notice")
    assert page.locator("tr.queue[data-queue='inbox'] td.dead").text_content() == "0"
    state = _sql(seeded, "SELECT state FROM todos WHERE id = %s", seeded["dead"])
    assert state == [{"state": "pending"}]


def test_deliveries_show_the_deciding_rule_todo_title_and_held_ones(page: Any, seeded: Any) -> None:
    hid = seeded["hook"]["webhook_id"]
    _sign_in(page, seeded)
    page.goto(f"/console/webhooks/{hid}")
    headers = page.locator("table.deliveries th").all_text_contents()
    assert "Outcome" not in headers and headers.count("Disposition") == 1
    assert "Decided by" in headers and "Todo" in headers
    rows = page.locator("tr.delivery")
    assert rows.count() == HELD + ISSUES
    issue = page.locator(f"tr.delivery:has(a[href$='{seeded['ids']['issue'][0]}'])")
    assert issue.locator("td.decided").text_content() == "default"
    assert "(inbox," in issue.locator("td.todo").text_content()
    title = _sql(seeded, "SELECT title FROM todos WHERE event_id = %s", seeded["ids"]["issue"][0])
    assert title[0]["title"] in issue.locator("td.todo .todo-title").text_content()
    if page.locator("#held-count").text_content() != "0 held":  # before the release test
        assert page.locator("#held-count").text_content() == f"{HELD} held"
        page.click("#held-count")
        assert page.locator("tr.delivery").count() == HELD
        held = page.locator("tr.delivery").first
        assert held.locator("td.disposition").text_content() == "held"
        assert (
            held.locator("td.decided").text_content() == "held: a fault in rule #1 \u201cboom\u201d"
        )
        assert held.locator("td.todo").text_content() == "—"
    # the envelope the rules saw: the payload and the stored (sanitized) headers
    page.goto(f"/console/deliveries/{seeded['ids']['issue'][0]}")
    envelope = json.loads(page.text_content("#envelope pre"))
    assert envelope["kind"] == "issues" and envelope["payload"]["issue"]["number"] == 100
    assert envelope["webhook_id"] == hid
    # its headers are the stored, sanitized ones, exactly what the MCP get answers
    got = on_runtime(
        seeded["server"].env,
        lambda rt: events_svc.get_event(rt, None, hid, seeded["ids"]["issue"][0]),
    )
    assert envelope["headers"] == got["headers"] and envelope["payload"] == got["payload"]
    assert page.locator("#waited").count() == 0  # only a pending delivery waits


def test_refusals_panel_shows_why_deliveries_were_refused(page: Any, seeded: Any) -> None:
    _sign_in(page, seeded)
    page.goto(f"/console/webhooks/{seeded['hook']['webhook_id']}")
    assert page.text_content("#refusals-total").startswith(f"{REFUSED} refused in all")
    reasons = page.locator("tr.refusal td.reason").all_text_contents()
    assert reasons == ["mismatch"] * REFUSED
    # another human's webhook, and so its refusals, is not found
    assert page.goto(f"/console/webhooks/{seeded['theirs']['webhook_id']}").status == 404


def test_rules_history_and_a_diff_between_two_versions(page: Any, seeded: Any, shots: Path) -> None:
    hid = seeded["hook"]["webhook_id"]
    _sign_in(page, seeded)
    page.goto(f"/console/webhooks/{hid}/rules")
    hint = page.text_content("#change-them")
    assert "switchboard webhook rules show|set|history|rollback" in hint
    assert "switchboard rules" not in hint.replace("switchboard webhook rules", "")
    versions = page.locator("tr.version")
    assert versions.count() == 3
    assert [versions.nth(i).get_attribute("data-version") for i in range(3)] == ["3", "2", "1"]
    authors = versions.locator("td.author").all_text_contents()
    assert authors == ["operator", seeded["world"].endpoints["ops"]["endpoint_id"], "operator"]
    assert "pull requests to review" in versions.nth(1).locator("td.note").text_content()
    page.check("input[name=a][value='1']")
    page.check("input[name=b][value='2']")
    page.click("#compare")
    diff = page.locator("#version-diff")
    assert "From version 1 to version 2" in diff.text_content()
    added = diff.locator(".diff-add").all_text_contents()
    removed = diff.locator(".diff-del").all_text_contents()
    assert any('"review"' in line for line in added), added
    assert any("boom" in line for line in removed), removed
    page.screenshot(path=str(shots / "console-rule-versions.png"), full_page=True)
    # v2 -> v3 changed only the note: the configs are the same
    page.goto(f"/console/webhooks/{hid}/rules?a=2&b=3")
    assert page.locator("#no-change").count() == 1


def test_release_held_shows_the_plan_and_applies_it_on_confirm(
    page: Any, seeded: Any, shots: Path
) -> None:
    hid = seeded["hook"]["webhook_id"]
    plan = on_runtime(
        seeded["server"].env, lambda rt: reroute_svc.release_held(rt, None, hid, plan=True)
    )
    assert plan["changed"] == HELD and plan["todos_planned"] == HELD
    _sign_in(page, seeded)
    page.goto(f"/console/webhooks/{hid}")
    page.click("#release-link")
    page.click("#plan-form button[type=submit]")
    summary = page.text_content("#plan-summary")
    assert f"{plan['evaluated']} deliveries evaluated, {HELD} would change" in summary
    assert f"{HELD} new todos" in summary
    assert page.locator("tr.planned-event").count() == HELD
    assert "review" in page.text_content("table.by-queue")
    # the plan saved nothing
    assert _sql(
        seeded,
        "SELECT count(*)::int AS n FROM events WHERE webhook_id = %s AND disposition = 'held'",
        hid,
    ) == [{"n": HELD}]
    page.screenshot(path=str(shots / "console-release-plan.png"), full_page=True)
    page.click("#confirm")
    assert f"{HELD} deliveries released, {HELD} todos created" in page.text_content("#done-summary")
    page.goto(f"/console/webhooks/{hid}")
    assert page.text_content("#held-count") == "0 held"
    page.goto(f"/console/deliveries/{seeded['ids']['held'][0]}")
    entry = page.locator("#reroutes tr.reroute")
    assert entry.count() == 1 and entry.locator("td").first.text_content() == "3"
    assert "review" in entry.text_content()
    assert "review" in page.text_content("#todos")
    # once: planning again changes nothing
    page.goto(f"/console/webhooks/{hid}/reroute?held=1")
    page.click("#plan-form button[type=submit]")
    assert page.locator("#nothing").count() == 1


def test_reroute_shows_the_plan_and_applies_it_on_confirm(
    page: Any, seeded: Any, shots: Path
) -> None:
    """A route added after the deliveries came: a re-route gives each a todo for the new
    target, exactly the plan's, once."""
    hid = seeded["hook"]["webhook_id"]
    helper = seeded["world"].endpoint("olga", "helper", queues="inbox,review,triage")
    env = seeded["server"].env
    on_runtime(env, lambda rt: webhooks_svc.add_route(rt, None, hid, helper["endpoint_id"]))
    # a route is no rules version; a save makes one, so the released deliveries (re-routed
    # under version 3 already) are re-routed again too
    on_runtime(env, lambda rt: rules_svc.set_policy(rt, None, hid, on_fault="hold", note="v4"))
    plan = on_runtime(env, lambda rt: reroute_svc.reroute_events(rt, None, hid, plan=True))
    assert plan["todos_planned"] > 0 and plan["by_endpoint"] == {
        helper["endpoint_id"]: plan["todos_planned"]
    }
    _sign_in(page, seeded)
    page.goto(f"/console/webhooks/{hid}")
    page.click("#reroute-link")
    page.click("#plan-form button[type=submit]")
    summary = page.text_content("#plan-summary")
    assert (
        f"{plan['evaluated']} deliveries evaluated, {plan['changed']} would change,"
        f" {plan['todos_planned']} new todos" in " ".join(summary.split())
    )
    assert page.locator("tr.planned-event").count() == len(plan["events"])
    page.screenshot(path=str(shots / "console-reroute-plan.png"), full_page=True)
    count = "SELECT count(*)::int AS n FROM todos WHERE endpoint_id = %s"
    assert _sql(seeded, count, helper["endpoint_id"]) == [{"n": 0}]  # the plan saved nothing
    page.click("#confirm")
    done = page.text_content("#done-summary")
    assert f"{plan['todos_planned']} todos created" in done
    assert _sql(seeded, count, helper["endpoint_id"]) == [{"n": plan["todos_planned"]}]
    page.goto(f"/console/webhooks/{hid}/reroute")
    page.click("#plan-form button[type=submit]")
    assert "0 new todos" in page.text_content("#plan-summary")


# --- HTTP -----------------------------------------------------------------------------------


def test_a_confirm_under_rules_changed_since_the_plan_applies_nothing(seeded: Any) -> None:
    hid = seeded["hook"]["webhook_id"]
    with contextlib.closing(_client(seeded)) as client:
        page = client.get(f"/console/webhooks/{hid}/reroute")
        assert page.status_code == 200 and "Show the plan" in page.text
        planned = client.post(
            f"/console/webhooks/{hid}/reroute",
            data={"csrf": _csrf(page.text), "step": "plan", "last": "100"},
        )
        assert planned.status_code == 200 and 'id="plan-summary"' in planned.text
        stale = client.post(
            f"/console/webhooks/{hid}/reroute",
            data={"csrf": _csrf(page.text), "step": "apply", "last": "100", "version": "1"},
        )
        assert stale.status_code == 409 and "nothing was applied" in stale.text
        bad = client.post(
            f"/console/webhooks/{hid}/reroute",
            data={"csrf": _csrf(page.text), "step": "plan", "last": "0"},
        )
        assert bad.status_code == 400 and "last: must be a number" in bad.text
        # without the CSRF token nothing runs
        assert (
            client.post(
                f"/console/webhooks/{hid}/reroute", data={"step": "apply", "version": "3"}
            ).status_code
            == 403
        )


def test_retry_is_the_owners_and_only_for_a_dead_todo(seeded: Any) -> None:
    with contextlib.closing(_client(seeded)) as client:
        csrf = _csrf(client.get("/console/queues").text)
        # a claimed todo is not dead: a conflict naming its state, nothing changed
        reply = client.post(f"/console/todos/{seeded['claimed']}/retry", data={"csrf": csrf})
        assert reply.status_code == 409 and "is claimed" in reply.text
        # an unknown todo (or not a todo id at all) is not found
        for todo in (str(uuid.uuid4()), "not-a-uuid"):
            reply = client.post(f"/console/todos/{todo}/retry", data={"csrf": csrf})
            assert reply.status_code == 404, todo
        # without the CSRF token, nothing runs
        reply = client.post(f"/console/todos/{seeded['claimed']}/retry")
        assert reply.status_code == 403
    state = _sql(seeded, "SELECT state, owner FROM todos WHERE id = %s", seeded["claimed"])
    assert state == [{"state": "claimed", "owner": "worker-1"}]


def test_the_origin_a_trusted_proxy_forwards_passes_and_an_untrusted_peers_does_not(
    seeded: Any,
) -> None:
    hid = seeded["hook"]["webhook_id"]
    path = f"/console/webhooks/{hid}/rules"
    candidate = json.dumps({"rules": [{"id": "x", "expr": "true", "action": {"drop": True}}]})
    proxied = {"X-Forwarded-Host": "console.example", "X-Forwarded-Proto": "https"}

    def post(client: httpx.Client, headers: dict[str, str]) -> int:
        csrf = _csrf(client.get(path).text)
        reply = client.post(path, data={"candidate": candidate, "csrf": csrf}, headers=headers)
        return reply.status_code

    with contextlib.closing(_client(seeded)) as via_proxy:  # from 127.0.0.1: trusted
        assert post(via_proxy, {**proxied, "Origin": "https://console.example"}) == 200
        assert post(via_proxy, {**proxied, "Origin": "https://console.example:443"}) == 200
        assert post(via_proxy, {**proxied, "Origin": "http://console.example"}) == 403
        assert post(via_proxy, {**proxied, "Origin": "https://evil.example"}) == 403
        assert post(via_proxy, {"Origin": "https://console.example"}) == 403  # no header
        two = {**proxied, "X-Forwarded-Host": "console.example, evil.example"}
        assert post(via_proxy, {**two, "Origin": "https://console.example"}) == 403
    other = httpx.HTTPTransport(local_address="127.0.0.2")
    with contextlib.closing(_client(seeded, transport=other)) as direct:  # untrusted peer
        assert post(direct, {**proxied, "Origin": "https://console.example"}) == 403
        assert post(direct, {}) == 200  # its own forms still post


@pytest.mark.parametrize(
    ("values", "named"),
    [
        (["10.0.0.1/8"], "trusted_proxies[0]"),  # host bits set: not what was meant
        (["127.0.0.1", "proxy.example"], "trusted_proxies[1]"),
        (["::1", ""], "trusted_proxies[1]"),
        ([7], "trusted_proxies[0]"),
    ],
)
def test_trusted_proxies_are_validated_naming_the_entry(values: list[Any], named: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"plugins.console.{named}")):
        trusted_proxies(values)
    assert [str(n) for n in trusted_proxies(["10.0.0.0/8", "::1", "192.0.2.7"])] == [
        "10.0.0.0/8",
        "::1/128",
        "192.0.2.7/32",
    ]
