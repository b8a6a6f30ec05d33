"""What a producer or a client sends that the console must answer with one of its pages,
never a 500 or a traceback: a delivery whose JSON holds a lone surrogate, numbers that
``str.isdigit()`` takes but ``int()`` does not, a non-ASCII CSRF token or cookie, a rules
candidate nested too deeply to read, and a form that is not one. A real server; the delivery
taken in by the real ingest function."""

from __future__ import annotations

import contextlib
import logging
import re
import tempfile
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from sanic import HTTPResponse, Request
from sanic.compat import Header
from sanic.response import html
from sbtest import CLI, Server
from sbworld import World, on_runtime
from switchboard_console.guard import Guard

from switchboard.config import load_config
from switchboard.service import rules as rules_svc
from switchboard.service.ingest import ingest
from switchboard.sources import Headers

LONE = "\ud800"
BIG = "9" * 4301  # past Python's 4300-digit limit for int()


@pytest.fixture(scope="module")
def seeded(module_server_factory: Any, module_dsn: str) -> dict[str, Any]:
    srv: Server = module_server_factory(module_dsn)
    w = World(CLI(srv.env).fast(), prefix="h-", direct=True)
    w.human("hal")
    w.endpoint("hal", "owner", queues="inbox", webhook_queues="inbox")
    hook = w.webhook("owner", "generic")

    async def seed(rt: Any) -> str:
        hid = hook["webhook_id"]
        rule = {"id": "noted", "expr": '.payload.note == "x"', "action": {"drop": True}}
        await rules_svc.set_rules(rt, None, hid, [rule], None, None)
        token = hook["ingest_url"].rsplit("/", 1)[1]
        # JSON's own escape for a lone surrogate, in a value and in a key
        body = b'{"note": "a\\ud800b", "\\udfff": 1, "title": "\\ud800"}'
        reply = await ingest(
            rt, token, Headers({"X-Delivery-Id": "lone-1"}), body, "application/json"
        )
        assert reply.status == 202, reply.body
        row = await rt.store.db.fetchone("SELECT id FROM events WHERE webhook_id = %s", (hid,))
        return str(row["id"])

    event = on_runtime(srv.env, seed)
    return {"server": srv, "base": srv.base_url, "world": w, "hook": hook, "event": event}


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, page[:500]
    return found[1]


def _signed_in(s: dict[str, Any]) -> httpx.Client:
    client = httpx.Client(base_url=s["base"], timeout=30)
    form = client.get("/console/signin")
    token = s["world"].endpoints["owner"]["token"]
    reply = client.post("/console/signin", data={"csrf": _csrf(form.text), "token": token})
    assert reply.status_code == 303, reply.text
    return client


def _page(reply: httpx.Response, status: int) -> str:
    """The console's own HTML page, with ``status``: its error text."""
    assert reply.status_code == status, (reply.status_code, reply.text[:300])
    assert reply.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in reply.headers["content-security-policy"]
    found = re.search(r'<p class="error">(.*?)</p>', reply.text, re.S)
    return found[1] if found else ""


def test_a_lone_surrogate_in_a_delivery_is_shown_as_a_replacement_character(
    seeded: Any,
) -> None:
    hid = seeded["hook"]["webhook_id"]
    with contextlib.closing(_signed_in(seeded)) as client:
        for path in (
            f"/console/deliveries/{seeded['event']}",
            f"/console/webhooks/{hid}",
            "/console/webhooks",
            "/console/queues",
        ):
            reply = client.get(path)
            assert reply.status_code == 200, (path, reply.status_code, reply.text[:300])
        delivery = client.get(f"/console/deliveries/{seeded['event']}").text
        assert "a\ufffdb" in delivery  # the payload, the envelope: U+FFFD, as README says


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("rules?a=%C2%B2&b=1", "a: must be a version number"),  # a=² passes str.isdigit()
        (f"rules?a={BIG}&b=1", "a: must be a version number"),
        (f"rules?a=1&b={BIG}", "b: must be a version number"),
        ("rules?a=0&b=1", "a: must be a version number"),
        ("rules?a=x&b=1", "a: must be a version number"),
        ("reroute?last=%C2%B2", "last: must be a number from 1 to 10000"),
        (f"reroute?last={BIG}", "last: must be a number from 1 to 10000"),
        ("reroute?last=0", "last: must be a number from 1 to 10000"),
    ],
)
def test_a_number_that_is_not_one_is_the_400_page(seeded: Any, query: str, says: str) -> None:
    hid = seeded["hook"]["webhook_id"]
    with contextlib.closing(_signed_in(seeded)) as client:
        assert _page(client.get(f"/console/webhooks/{hid}/{query}"), 400) == says


@pytest.mark.parametrize("last", ["\u00b2", BIG, "0"])
def test_a_posted_last_that_is_not_a_number_is_refused_by_name(seeded: Any, last: str) -> None:
    hid = seeded["hook"]["webhook_id"]
    with contextlib.closing(_signed_in(seeded)) as client:
        csrf = _csrf(client.get(f"/console/webhooks/{hid}/rules").text)
        dry = client.post(
            f"/console/webhooks/{hid}/rules",
            data={"csrf": csrf, "candidate": '{"rules": []}', "last": last},
        )
        assert dry.status_code == 400 and "last: must be a number from 1 to 10000" in dry.text
        plan = client.post(
            f"/console/webhooks/{hid}/reroute", data={"csrf": csrf, "step": "plan", "last": last}
        )
        assert _page(plan, 400) == "last: must be a number from 1 to 10000"


@pytest.mark.parametrize(
    "candidate",
    [
        "[" * 100_000 + "]" * 100_000,  # the report's: past every Python's JSON parser
        '{"rules": ' + "[" * 100_000 + "]" * 100_000 + "}",
    ],
)
def test_a_candidate_nested_too_deeply_is_the_400_page_naming_it(
    seeded: Any, candidate: str
) -> None:
    hid = seeded["hook"]["webhook_id"]
    with contextlib.closing(_signed_in(seeded)) as client:
        csrf = _csrf(client.get(f"/console/webhooks/{hid}/rules").text)
        dry = client.post(
            f"/console/webhooks/{hid}/rules",
            data={"csrf": csrf, "candidate": candidate, "last": "5"},
        )
        assert dry.status_code == 400, (dry.status_code, dry.text[:300])
        found = re.search(r'id="dry-run-error">(.*?)</p>', dry.text, re.S)
        assert found and found[1] == "candidate: nested too deeply to read as JSON", dry.text[:300]


def test_a_candidate_nested_deep_but_readable_is_the_400_page_naming_the_limit(
    seeded: Any,
) -> None:
    """200 levels: every Python's parser reads it (3.12 reads ~1,500, 3.13 ~10,000), and
    walking it (an id minted from a rule's JSON) could recurse: the structure check refuses
    any configuration nested deeper than 64 levels, first."""
    hid = seeded["hook"]["webhook_id"]
    deep = '{"rules": [{"expr": ".", "action": {"queue": ' + "[" * 200 + "]" * 200 + "}}]}"
    with contextlib.closing(_signed_in(seeded)) as client:
        csrf = _csrf(client.get(f"/console/webhooks/{hid}/rules").text)
        dry = client.post(
            f"/console/webhooks/{hid}/rules", data={"csrf": csrf, "candidate": deep, "last": "5"}
        )
        assert dry.status_code == 400, (dry.status_code, dry.text[:300])
        found = re.search(r'id="dry-run-error">(.*?)</p>', dry.text, re.S)
        assert found and "nested deeper than 64 levels" in found[1], dry.text[:300]


@pytest.mark.parametrize(
    ("form", "cookie"),
    [
        (b"csrf=x&token=a", b"sb_console_csrf=y"),  # the ASCII mismatch every check refuses
        (b"csrf=%C3%A9&token=a", b"sb_console_csrf=x"),  # a non-ASCII token
        (b"csrf=x&token=a", b"sb_console_csrf=\xc3\xa9"),  # a non-ASCII nonce
        (b"csrf=x&token=a", b"sb_console_csrf=\xe9"),  # not UTF-8 at all
    ],
)
def test_a_non_ascii_csrf_token_or_nonce_is_refused_as_any_wrong_one(
    seeded: Any, form: bytes, cookie: bytes
) -> None:
    with httpx.Client(base_url=seeded["base"], timeout=30) as bare:
        reply = bare.post(
            "/console/signin",
            content=form,
            headers={
                "Content-Type": "application/x-www-form-urlencoded",
                "Origin": seeded["base"],
                "Cookie": cookie,  # type: ignore[dict-item]  # httpx sends bytes as they are
            },
        )
        assert "CSRF token is missing or wrong" in _page(reply, 403)


@pytest.mark.parametrize("mac", [b"\xc3\xa9", b"\xe9", b"AAAA"])
def test_a_session_cookie_with_a_non_ascii_mac_is_no_session(seeded: Any, mac: bytes) -> None:
    ep = seeded["world"].endpoints["owner"]["endpoint_id"].encode()
    with httpx.Client(base_url=seeded["base"], timeout=30) as forged:
        cookie = b"sb_console=" + ep + b".9999999999." + mac
        reply = forged.get("/console/webhooks", headers={"Cookie": cookie})  # type: ignore[dict-item]
        assert reply.status_code == 303 and reply.headers["location"] == "/console/signin"


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("multipart/form-data", b"--x\r\nContent-Disposition: form-data; name=csrf\r\n\r\nx"),
        ("application/x-www-form-urlencoded", b"csrf=\xff\xfe&token=a"),
    ],
)
def test_a_form_that_is_not_one_is_refused_without_a_traceback(
    seeded: Any, content_type: str, body: bytes
) -> None:
    log = seeded["server"].log
    start = log.stat().st_size
    with httpx.Client(base_url=seeded["base"], timeout=30) as bare:
        reply = bare.post("/console/signin", content=body, headers={"Content-Type": content_type})
        assert "CSRF token is missing or wrong" in _page(reply, 403)
        assert bare.get("/healthz").status_code == 200  # the log has caught up with the post
    with open(log, "rb") as fh:
        fh.seek(start)
        logged = fh.read().decode("utf-8", "replace")
    assert "Failed when parsing form" not in logged and "Traceback" not in logged, logged


async def test_an_unexpected_error_on_a_console_route_is_its_500_page(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A defect of ours is logged with its traceback and answered with the console's own
    page (not the API's JSON), status kept."""
    with tempfile.TemporaryDirectory() as data:
        guard = Guard(load_config(env={"SWITCHBOARD_DATA_DIR": data}))

    async def broken(request: Request) -> HTTPResponse:
        raise RuntimeError("a defect")

    def render(request: Request, name: str, status: int = 200, **ctx: Any) -> HTTPResponse:
        return html(f"{name}: {ctx['title']}", status=status)

    request: Any = SimpleNamespace(
        method="GET", path="/console/broken", headers=Header({"host": "127.0.0.1:8080"})
    )
    with caplog.at_level(logging.ERROR):
        reply = await guard.wrap(broken, render)(request)
    assert reply.status == 500 and reply.body == b"error.html: Internal error"
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert record.exc_info and "GET /console/broken" in record.getMessage()


#: A producer's kind: a bidi override, then one word far wider than any screen.
STEERING_KIND = "\u202eok" + "k" * 3000


def test_a_producers_bidi_override_and_long_word_stay_in_their_cell(seeded: Any, page: Any) -> None:
    """A kind (any producer's header) with U+202E would reverse the console's own words
    after it, and one unbroken word pushed every other column off the screen: the override
    is shown as U+FFFD (as the CLI's tables show it) and a long word wraps in its cell."""
    hid = seeded["hook"]["webhook_id"]
    token = seeded["hook"]["ingest_url"].rsplit("/", 1)[1]

    async def deliver(rt: Any) -> None:
        headers = Headers({"X-Delivery-Id": "steer-1", "X-GitHub-Event": STEERING_KIND})
        reply = await ingest(rt, token, headers, b'{"n": 1}', "application/json")
        assert reply.status == 202, reply.body

    on_runtime(seeded["server"].env, deliver)
    with contextlib.closing(_signed_in(seeded)) as client:
        listed = client.get(f"/console/webhooks/{hid}").text
    assert "\u202e" not in listed and "\ufffdok" in listed
    page.goto("/console/signin")
    page.fill("#token", seeded["world"].endpoints["owner"]["token"])
    page.click("form.signin button[type=submit]")
    page.wait_for_url("**/console/webhooks")
    page.goto(f"/console/webhooks/{hid}")
    assert page.locator("td", has_text="\ufffdok").count() >= 1
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 1300, width  # the viewport is 1280 wide
