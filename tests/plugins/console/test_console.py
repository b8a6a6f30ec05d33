"""The web console (issue 17): real server, real Chromium, one seeded tenant per module.

One ``switchboard serve`` and one browser serve the whole module. alice's github webhook gets
~60 real-shaped deliveries through the real ingest function (issues, pull requests, closed
ones, a faulting rule) plus hostile ones carrying ``<script>`` and ``"><img onerror>`` in the
kind, headers, payload and title; mallory (another human) has a webhook of her own. Then the
browser signs in and walks the pages, and httpx checks the headers, cookies and CSRF.
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from sbtest import CLI, Server
from sbworld import World, fixture_body, on_runtime

from switchboard.cli.send import build_request
from switchboard.service import identity
from switchboard.service import rules as rules_svc
from switchboard.service.ingest import ingest
from switchboard.sources import Headers

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
XSS = '<script>alert("xss")</script>"><img src=x onerror=alert(1) id=pwned>'
RULES = [
    # faults on pull requests (no issue to read), says false on issues
    {
        "id": "title-zzz",
        "expr": '.payload.issue.title | ascii_downcase | startswith("zzz")',
        "action": {"queue": "triage"},
    },
    {"id": "prs", "expr": '.kind == "pull_request"', "action": {"queue": "review"}},
    {"id": "closed", "expr": '.payload.action == "closed"', "action": {"drop": True}},
    {
        "id": "label-bug",
        "expr": '(.payload.issue.labels[0].name | ascii_downcase) == "bug"',
        "action": {"queue": "triage"},
    },
]
PULLS, ISSUES, CLOSED = 24, 24, 12


_body = fixture_body


@pytest.fixture(scope="module")
def seeded(module_server_factory: Any, module_dsn: str) -> dict[str, Any]:
    srv: Server = module_server_factory(module_dsn)
    w = World(CLI(srv.env).fast(), prefix="c-", direct=True)
    w.human("alice")
    w.human("mallory")
    w.endpoint("alice", "owner", queues="inbox,review,triage", webhook_queues="inbox,review,triage")
    w.endpoint("alice", "spare")
    w.endpoint("mallory", "intruder")
    github = w.webhook("owner", "github")
    theirs = w.webhook("intruder", "github")

    async def seed(rt: Any) -> dict[str, Any]:
        ids: dict[str, Any] = {"pull": [], "issue": [], "closed": [], "xss": [], "theirs": []}

        async def send(
            hook: dict[str, Any],
            body: bytes,
            event: str,
            bucket: str,
            extra: dict[str, str] | None = None,
        ) -> None:
            headers_extra = {"X-GitHub-Delivery": str(uuid.uuid4()), **(extra or {})}
            data, headers = build_request(
                "github", body, hook["signing_secret"].encode(), event, headers_extra, False
            )
            token = hook["ingest_url"].rsplit("/", 1)[1]
            reply = await ingest(rt, token, Headers(headers), data, "application/json")
            assert reply.status == 202, reply.body
            row = await rt.store.db.fetchone(
                "SELECT id FROM events WHERE webhook_id = %s ORDER BY received_at DESC, id DESC"
                " LIMIT 1",
                (hook["webhook_id"],),
            )
            ids[bucket].append(str(row["id"]))

        await rules_svc.set_rules(rt, None, github["webhook_id"], RULES, None, None)
        for i in range(PULLS + ISSUES + CLOSED):
            if i % 5 in (0, 2) and len(ids["pull"]) < PULLS:
                await send(
                    github,
                    _body("github_pull_request_opened", lambda d, i=i: d.update(number=i)),
                    "pull_request",
                    "pull",
                )
                continue

            def issue(d: dict[str, Any], i: int = i) -> None:
                d["issue"]["number"] = i
                d["action"] = "closed" if i % 5 == 4 else "opened"

            await send(
                github,
                _body("github_issues_opened", issue),
                "issues",
                "closed" if i % 5 == 4 else "issue",
            )

        def hostile(d: dict[str, Any]) -> None:
            d["action"] = XSS
            d["issue"]["title"] = XSS
            d["issue"]["body"] = XSS
            d["issue"]["labels"] = [{"name": XSS}]
            d[XSS] = XSS

        await send(
            github,
            _body("github_issues_opened", hostile),
            XSS,
            "xss",
            {"X-Hostile": XSS, "X-Hostile-Two": '"><svg onload=alert(2)>'},
        )
        await send(
            github, _body("github_issues_opened", hostile), "issues", "xss", {"X-Hostile": XSS}
        )
        await send(theirs, _body("github_issues_opened", lambda d: None), "issues", "theirs")
        return ids

    ids = on_runtime(srv.env, seed)
    return {
        "server": srv,
        "world": w,
        "github": github,
        "theirs": theirs,
        "ids": ids,
        "base": srv.base_url,
    }


def _token(s: dict[str, Any], name: str = "owner") -> str:
    return str(s["world"].endpoints[name]["token"])


# --- HTTP level -----------------------------------------------------------------------------


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, page[:500]
    return found[1]


def _signed_in(s: dict[str, Any], name: str = "owner") -> tuple[httpx.Client, httpx.Response]:
    client = httpx.Client(base_url=s["base"], timeout=30)
    form = client.get("/console/signin")
    reply = client.post(
        "/console/signin", data={"csrf": _csrf(form.text), "token": _token(s, name)}
    )
    assert reply.status_code == 303, reply.text
    return client, reply


def _pages(s: dict[str, Any]) -> list[str]:
    hook, event = s["github"]["webhook_id"], s["ids"]["closed"][0]
    return [
        "/console/webhooks",
        f"/console/webhooks/{hook}",
        f"/console/webhooks/{hook}?disposition=dropped",
        f"/console/webhooks/{hook}/rules",
        f"/console/deliveries/{event}",
        f"/console/deliveries/{s['ids']['xss'][0]}",
    ]


def _secure(reply: httpx.Response) -> None:
    csp = reply.headers["content-security-policy"]
    assert "unsafe-inline" not in csp and "default-src 'none'" in csp
    assert "script-src" not in csp  # no script at all (default-src 'none')
    assert "frame-ancestors 'none'" in csp
    assert reply.headers["x-frame-options"] == "DENY"
    assert reply.headers["x-content-type-options"] == "nosniff"


def test_security_headers_on_every_page_and_the_token_is_never_shown(seeded: Any) -> None:
    with httpx.Client(base_url=seeded["base"]) as bare:
        _secure(bare.get("/console/signin"))
        # not signed in: every page redirects to sign-in, with the same headers
        for path in ("/console", "/console/"):
            reply = bare.get(path, follow_redirects=True)
            assert str(reply.url).endswith("/console/signin") and reply.status_code == 200
        for path in _pages(seeded):
            reply = bare.get(path)
            assert reply.status_code == 303 and reply.headers["location"] == "/console/signin"
            _secure(reply)
    client, _ = _signed_in(seeded)
    with contextlib.closing(client):
        for path in ["/console/static/console.css", *_pages(seeded)]:
            reply = client.get(path)
            assert reply.status_code == 200, (path, reply.text[:300])
            _secure(reply)
            assert _token(seeded) not in reply.text
            assert "<script" not in reply.text.lower().replace("&lt;script", "")
        # the session cookie is not the token, nor does it contain it
        assert _token(seeded) not in str(client.cookies.get("sb_console"))


def test_cookie_flags(seeded: Any) -> None:
    client, reply = _signed_in(seeded)
    with contextlib.closing(client):
        cookies = [v for k, v in reply.headers.multi_items() if k == "set-cookie"]
        session = next(c for c in cookies if c.startswith("sb_console="))
        flags = {p.strip().split("=")[0].lower(): p.strip() for p in session.split(";")[1:]}
        assert "httponly" in flags
        assert flags["samesite"].lower() == "samesite=strict"
        assert flags["path"] == "Path=/console"
        assert _token(seeded) not in session


def test_csrf_refuses_a_post_without_or_with_a_wrong_token(seeded: Any) -> None:
    client, _ = _signed_in(seeded)
    hook = seeded["github"]["webhook_id"]
    with contextlib.closing(client):
        page = client.get(f"/console/webhooks/{hook}/rules")
        good = _csrf(page.text)
        candidate = json.dumps({"rules": RULES})
        for data in ({"candidate": candidate}, {"candidate": candidate, "csrf": good[:-2] + "xx"}):
            refused = client.post(f"/console/webhooks/{hook}/rules", data=data)
            assert refused.status_code == 403
            assert "diff-summary" not in refused.text
            assert (
                client.post(
                    "/console/signout", data={k: v for k, v in data.items() if k == "csrf"}
                ).status_code
                == 403
            )
        # another origin's post is refused even with the right token
        assert (
            client.post(
                f"/console/webhooks/{hook}/rules",
                data={"candidate": candidate, "csrf": good},
                headers={"Origin": "http://evil.example"},
            ).status_code
            == 403
        )
        ok = client.post(
            f"/console/webhooks/{hook}/rules", data={"candidate": candidate, "csrf": good}
        )
        assert ok.status_code == 200 and "diff-summary" in ok.text
    # sign-in itself is a form that posts: no token, no session
    with httpx.Client(base_url=seeded["base"]) as bare:
        reply = bare.post("/console/signin", data={"token": _token(seeded)})
        assert reply.status_code == 403 and "sb_console" not in bare.cookies


def test_a_host_that_is_not_this_service_gets_421_on_every_page(seeded: Any) -> None:
    """DNS rebinding: a page on evil.example resolving to us sends Host: evil.example."""
    client, _ = _signed_in(seeded)
    with contextlib.closing(client):
        for path in ["/console/signin", "/console/static/console.css", *_pages(seeded)]:
            for host in ("evil.example", "127.0.0.1:80@evil.example", "127.0.0.1.evil.example"):
                reply = client.get(path, headers={"Host": host})
                assert reply.status_code == 421, (path, host, reply.status_code)
                assert "does not answer to that host name" in reply.text
                _secure(reply)
        hook = seeded["github"]["webhook_id"]
        good = _csrf(client.get(f"/console/webhooks/{hook}/rules").text)
        # a rebinding page cannot make its Origin match by claiming a Host of its own
        forged = client.post(
            f"/console/webhooks/{hook}/rules",
            data={"candidate": json.dumps({"rules": RULES}), "csrf": good},
            headers={"Host": "evil.example", "Origin": "http://evil.example"},
        )
        assert forged.status_code == 421
        port = seeded["base"].rsplit(":", 1)[1]
        for origin in (f"http://localhost:{port}", f"http://127.0.0.1:{port}"):
            ok = client.post(
                f"/console/webhooks/{hook}/rules",
                data={"candidate": json.dumps({"rules": RULES}), "csrf": good},
                headers={"Origin": origin},
            )
            assert ok.status_code == 200, (origin, ok.text[:200])


def test_a_forged_cookie_and_a_revoked_endpoint_have_no_session(seeded: Any) -> None:
    with httpx.Client(base_url=seeded["base"]) as forged:
        ep = seeded["world"].endpoints["owner"]["endpoint_id"]
        forged.cookies.set("sb_console", f"{ep}.9999999999.AAAA", path="/console")
        reply = forged.get("/console/webhooks")
        assert reply.status_code == 303 and reply.headers["location"] == "/console/signin"
    client, _ = _signed_in(seeded, "spare")
    with contextlib.closing(client):
        assert client.get("/console/webhooks").status_code == 200
        spare = seeded["world"].endpoints["spare"]["endpoint_id"]
        on_runtime(seeded["server"].env, lambda rt: identity.revoke_endpoint(rt, spare))
        reply = client.get("/console/webhooks")
        assert reply.status_code == 303 and reply.headers["location"] == "/console/signin"


def test_another_humans_ids_are_not_found(seeded: Any) -> None:
    client, _ = _signed_in(seeded)
    theirs = seeded["theirs"]["webhook_id"]
    with contextlib.closing(client):
        for path in (
            f"/console/webhooks/{theirs}",
            f"/console/webhooks/{theirs}/rules",
            f"/console/deliveries/{seeded['ids']['theirs'][0]}",
            "/console/deliveries/not-a-uuid",
            f"/console/webhooks/{uuid.uuid4()}",
        ):
            reply = client.get(path)
            assert reply.status_code == 404, path
            assert "nothing here that this endpoint can see" in reply.text
            assert theirs not in reply.text
        # a path the console does not have: its own 404 page, with its security headers
        for path in ("/console/nope", "/console/webhooks/x/y/z"):
            reply = client.get(path)
            assert reply.status_code == 404 and "no such console page" in reply.text, path
            assert reply.headers["x-frame-options"] == "DENY", path
            assert "default-src 'none'" in reply.headers["content-security-policy"], path


# --- in Chromium ----------------------------------------------------------------------------


def _sign_in(page: Any, token: str) -> None:
    page.goto("/console/signin")
    page.fill("#token", token)
    page.click("form.signin button[type=submit]")
    page.wait_for_url("**/console/webhooks")


def test_sign_in_and_walk_webhook_delivery_trace(page: Any, seeded: Any, shots: Path) -> None:
    page.goto("/console/webhooks")
    assert page.url.endswith("/console/signin")  # not signed in yet
    page.fill("#token", "sbe_not-a-token")
    page.click("form.signin button[type=submit]")
    assert "not a live endpoint token" in page.text_content(".error")
    _sign_in(page, _token(seeded))
    assert page.locator("svg.chart").count() == 1
    assert page.locator("svg.chart rect.bar-routed").count() >= 1
    assert page.locator("svg.chart rect.bar-faulted").count() >= 1
    assert f"{PULLS} faulted" in page.text_content("td.counts")
    page.screenshot(path=str(shots / "console-webhooks.png"), full_page=True)
    page.click(f"a.hook[href$='{seeded['github']['webhook_id']}']")
    assert page.locator("table.deliveries tr.delivery").count() == 25
    page.screenshot(path=str(shots / "console-deliveries.png"), full_page=True)
    # the newest non-hostile closed issue: dropped by rule "closed", "label-bug" faulted first?
    closed = seeded["ids"]["closed"][-1]
    page.goto(f"/console/deliveries/{closed}")
    story = page.text_content("#trace")
    assert "rule #3 \u201cclosed\u201d matched" in story
    assert "dropped the delivery" in story
    assert "Fault" not in story
    verdicts = page.locator("#verdicts tr.verdict")
    assert verdicts.count() == 4
    assert "did not match" in verdicts.nth(0).text_content()
    assert "did not match" in verdicts.nth(1).text_content()
    assert verdicts.nth(2).text_content().endswith("matched")
    assert "not evaluated" in verdicts.nth(3).text_content()
    # a pull request went to review, with its todo
    page.goto(f"/console/deliveries/{seeded['ids']['pull'][0]}")
    story = page.text_content("#trace")
    assert "rule #2 \u201cprs\u201d matched" in story
    assert "Fault in rule #1 \u201ctitle-zzz\u201d: error" in story
    assert "faulted" in page.locator("#verdicts tr.verdict").nth(0).text_content()
    assert "review" in page.text_content("#todos")
    page.screenshot(path=str(shots / "console-delivery.png"), full_page=True)
    # an issue labelled bug: the third rule, to triage
    page.goto(f"/console/deliveries/{seeded['ids']['issue'][0]}")
    assert "rule #4 \u201clabel-bug\u201d matched" in page.text_content("#trace")
    assert "triage" in page.text_content("#todos")


def test_filters_and_paging(page: Any, seeded: Any) -> None:
    _sign_in(page, _token(seeded))
    hook = seeded["github"]["webhook_id"]
    page.goto(f"/console/webhooks/{hook}")
    page.select_option("select[name=disposition]", "dropped")
    page.click("#filters button[type=submit]")
    rows = page.locator("table.deliveries tr.delivery")
    assert rows.count() == CLOSED
    assert set(rows.locator("td:nth-child(4)").all_text_contents()) == {"dropped"}
    page.goto(f"/console/webhooks/{hook}")
    page.fill("input[name=kind]", "pull_request")
    page.click("#filters button[type=submit]")
    assert set(page.locator("tr.delivery td.kind").all_text_contents()) == {"pull_request"}
    assert page.locator("tr.delivery").count() == PULLS
    page.goto(f"/console/webhooks/{hook}?verified=no")
    assert page.locator("tr.delivery").count() == 0
    # a filter holds across pages: the issues (and the hostile one sent as "issues")
    page.goto(f"/console/webhooks/{hook}?kind=issues")
    kinds: list[str] = page.locator("tr.delivery td.kind").all_text_contents()
    assert len(kinds) == 25
    page.click("#next-page")
    assert page.input_value("input[name=kind]") == "issues"
    kinds += page.locator("tr.delivery td.kind").all_text_contents()
    assert page.locator("#next-page").count() == 0
    assert kinds == ["issues"] * (ISSUES + CLOSED + 1)
    # paging everything: each delivery once, newest first, across pages
    page.goto(f"/console/webhooks/{hook}")
    seen: list[str] = []
    while True:
        seen += page.locator("tr.delivery td:first-child a").evaluate_all(
            "links => links.map(a => a.getAttribute('href'))"
        )
        more = page.locator("#next-page")
        if not more.count():
            break
        more.click()
    total = PULLS + ISSUES + CLOSED + len(seeded["ids"]["xss"])
    assert len(seen) == total == len(set(seen))
    assert seen[0].endswith(seeded["ids"]["xss"][-1])  # newest first
    assert seen[-1].endswith(seeded["ids"]["pull"][0])  # the first one sent, last


def test_the_dry_run_form_shows_the_diff(page: Any, seeded: Any, shots: Path) -> None:
    _sign_in(page, _token(seeded))
    hook = seeded["github"]["webhook_id"]
    page.goto(f"/console/webhooks/{hook}/rules")
    assert page.locator("table.rules tbody tr").count() == len(RULES)
    moved = json.loads(json.dumps(RULES))
    moved[1]["action"] = {"queue": "inbox"}
    page.fill("#candidate", json.dumps({"rules": moved}))
    page.click("#dry-run button[type=submit]")
    assert f"{PULLS} would change" in page.text_content("#diff-summary")
    assert page.locator("tr.change").count() == PULLS
    page.screenshot(path=str(shots / "console-dry-run.png"), full_page=True)
    # a broken candidate is an error on the form, not a page crash; nothing was saved
    page.fill("#candidate", "{not json")
    page.click("#dry-run button[type=submit]")
    assert "not JSON" in page.text_content("#dry-run-error")
    page.goto(f"/console/webhooks/{hook}/rules")
    assert "review" in page.text_content("table.rules")


def test_hostile_strings_are_shown_escaped_and_nothing_runs(page: Any, seeded: Any) -> None:
    _sign_in(page, _token(seeded))
    hook = seeded["github"]["webhook_id"]
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    for path in (
        f"/console/webhooks/{hook}",
        f"/console/webhooks/{hook}?kind=" + XSS,
        *(f"/console/deliveries/{e}" for e in seeded["ids"]["xss"]),
    ):
        page.goto(
            path
            if "?" not in path
            else path.replace("<", "%3C")
            .replace(">", "%3E")
            .replace('"', "%22")
            .replace(" ", "%20")
        )
        assert page.locator("script").count() == 0, path
        assert page.locator("#pwned, img[src=x], svg[onload]").count() == 0, path
    first = f"/console/deliveries/{seeded['ids']['xss'][0]}"
    page.goto(first)
    assert XSS in page.text_content("#kind")  # the kind, as text
    assert XSS in page.text_content("#headers")
    assert '"><svg onload=alert(2)>' in page.text_content("#headers")
    assert "<script>alert(" in page.text_content("#payload")
    assert "<img src=x onerror=alert(1) id=pwned>" in page.text_content("#payload")
    assert XSS in page.text_content("#todos")  # the todo's title
    page.goto(f"/console/deliveries/{seeded['ids']['xss'][1]}")
    assert XSS in page.text_content("#verdicts") or page.locator("#verdicts").count() == 1
    page.goto(f"/console/webhooks/{hook}")
    assert XSS in page.text_content("table.deliveries")
    assert page.dialogs == [] and errors == []


def test_another_tenants_url_is_404_in_the_browser(page: Any, seeded: Any) -> None:
    _sign_in(page, _token(seeded))
    reply = page.goto(f"/console/deliveries/{seeded['ids']['theirs'][0]}")
    assert reply.status == 404
    assert "Not found" in page.text_content("h1")
    reply = page.goto(f"/console/webhooks/{seeded['theirs']['webhook_id']}")
    assert reply.status == 404


def test_sign_out(page: Any, seeded: Any) -> None:
    _sign_in(page, _token(seeded))
    assert any(c["name"] == "sb_console" for c in page.context.cookies())
    page.click("#signout")
    page.wait_for_url("**/console/signin")
    assert not any(c["name"] == "sb_console" for c in page.context.cookies())
    page.goto(f"/console/webhooks/{seeded['github']['webhook_id']}")
    assert page.url.endswith("/console/signin")
