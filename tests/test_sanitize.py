"""Header sanitizing: lower-cased names, credentials redacted, repeats joined."""

from __future__ import annotations

import pytest

from switchboard.sanitize import REDACTED, redact_value, sanitize_headers
from switchboard.sources import Headers

R = REDACTED

HEADER_CASES = [
    # (id, given header, expected sanitized value)
    ("authorization", ("Authorization", "Bearer abc.def"), R),
    ("proxy-authorization", ("Proxy-Authorization", "Basic dXNlcjpwdw=="), R),
    ("cookie", ("Cookie", "sid=abc"), R),
    ("set-cookie", ("Set-Cookie", "sid=abc; HttpOnly"), R),
    ("hub signature", ("X-Hub-Signature-256", "sha256=00ff"), R),
    ("gitea signature", ("X-Gitea-Signature", "00ff"), R),
    ("cairn signature", ("X-Cairn-Signature", "sha256=00ff"), R),
    ("token", ("X-Gitlab-Token", "glpat-1"), R),
    ("secret", ("X-Webhook-Secret", "s3"), R),
    ("api-key", ("X-Api-Key", "k"), R),
    ("apikey", ("ApiKey", "k"), R),
    ("auth fragment", ("X-Auth-User", "u"), R),
    ("password", ("X-Password", "p"), R),
    ("session", ("X-Session-Id", "s"), R),
    ("credential", ("X-Amz-Credential", "c"), R),
    ("private", ("X-Private-Note", "n"), R),
    ("plain event", ("X-GitHub-Event", "issues"), "issues"),
    ("plain delivery", ("X-GitHub-Delivery", "72d3162e"), "72d3162e"),
    ("content type", ("Content-Type", "application/json; charset=utf-8"), None),
    (
        "token in query",
        ("Referer", "https://h/p?token=abc&page=2"),
        f"https://h/p?token={R}&page=2",
    ),
    (
        "api_key after &",
        ("X-Origin", "https://h/p?a=1&api_key=zzz"),
        f"https://h/p?a=1&api_key={R}",
    ),
    ("bare signature param", ("X-Callback", "signature=abc"), f"signature={R}"),
    ("access_token", ("Location", "/cb?access_token=t1#frag"), f"/cb?access_token={R}#frag"),
    ("secret param", ("X-Return", "/x?secret=s&ok=1"), f"/x?secret={R}&ok=1"),
    ("password param", ("X-Return", "/x?password=p"), f"/x?password={R}"),
    ("key param", ("X-Return", "/x?key=k&monkey=m"), f"/x?key={R}&monkey=m"),
    ("sig param", ("X-Return", "/x?sig=s&design=d"), f"/x?sig={R}&design=d"),
    ("auth param", ("X-Return", "/x?auth=a&author=bob"), f"/x?auth={R}&author=bob"),
    ("upper-case param", ("X-Return", "/x?X-Amz-Signature=abc"), f"/x?X-Amz-Signature={R}"),
    (
        "url inside a link header",
        ("Link", '<https://h/p?page=2&token=abc>; rel="next"'),
        f'<https://h/p?page=2&token={R}>; rel="next"',
    ),
    ("empty secret value stays empty", ("X-Return", "/x?token=&a=1"), "/x?token=&a=1"),
    ("no parameters", ("User-Agent", "GitHub-Hookshot/044aadd"), "GitHub-Hookshot/044aadd"),
]


@pytest.mark.parametrize(
    "header,expected", [c[1:] for c in HEADER_CASES], ids=[c[0] for c in HEADER_CASES]
)
def test_sanitize_table(header: tuple[str, str], expected: str | None) -> None:
    name, value = header
    assert sanitize_headers([header]) == {name.lower(): value if expected is None else expected}


def test_repeated_headers_join_in_order() -> None:
    given = [("X-Forwarded-For", "1.1.1.1"), ("x-forwarded-for", "2.2.2.2"), ("Via", "1.1 p")]
    assert sanitize_headers(given) == {"x-forwarded-for": "1.1.1.1, 2.2.2.2", "via": "1.1 p"}


def test_repeated_secret_headers_stay_one_marker() -> None:
    given = [("Set-Cookie", "a=1"), ("Set-Cookie", "b=2")]
    assert sanitize_headers(given) == {"set-cookie": R}


@pytest.mark.parametrize(
    "headers",
    [
        {"Authorization": "x", "X-Event": "e"},
        Headers({"Authorization": "x", "X-Event": "e"}),
        [("Authorization", "x"), ("X-Event", "e")],
    ],
    ids=["mapping", "Headers", "pairs"],
)
def test_accepts_every_header_shape(headers: object) -> None:
    assert sanitize_headers(headers) == {"authorization": R, "x-event": "e"}  # type: ignore[arg-type]


def test_headers_keep_repeats_that_its_lookup_hides() -> None:
    # Headers.get() answers the first value; persisted headers keep both.
    assert sanitize_headers(Headers([("A", "1"), ("a", "2")])) == {"a": "1, 2"}


def test_redact_value_leaves_plain_text_alone() -> None:
    assert redact_value("no parameters here") == "no parameters here"
