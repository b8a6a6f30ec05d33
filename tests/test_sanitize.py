"""Header sanitizing: lower-cased names, credentials redacted, repeats joined."""

from __future__ import annotations

import json

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
    # --- secret header names: fragments, whole words, ``key`` as the last word
    ("shopify hmac", ("X-Shopify-Hmac-Sha256", "b64="), R),
    ("hmac", ("X-Hmac", "00ff"), R),
    ("sig word", ("X-Request-Sig", "00ff"), R),
    ("sig word mid-name", ("X-PayPal-Transmission-Sig", "s"), R),
    ("functions key", ("X-Functions-Key", "k"), R),
    ("webhook key", ("X-Webhook-Key", "k"), R),
    ("webhook key, underscores", ("x_webhook_key", "k"), R),
    ("apim subscription key", ("Ocp-Apim-Subscription-Key", "k"), R),
    ("google api key", ("X-Goog-Api-Key", "k"), R),
    ("key alone", ("Key", "k"), R),
    ("jwt word", ("Cf-Access-Jwt-Assertion", "eyJ.x.y"), R),
    ("passwd", ("X-Passwd", "p"), R),
    ("pwd word", ("X-User-Pwd", "p"), R),
    # --- names that must stay readable
    ("gitea event", ("X-Gitea-Event", "issues"), "issues"),
    ("request id", ("X-Request-Id", "r1"), "r1"),
    ("delivery id", ("X-Delivery-Id", "d1"), "d1"),
    ("hook id", ("X-GitHub-Hook-Id", "42"), "42"),
    ("keep-alive: no key word", ("Keep-Alive", "timeout=5"), "timeout=5"),
    ("accept-encoding", ("Accept-Encoding", "gzip, br"), "gzip, br"),
    ("monkey: no key word", ("X-Monkey", "m"), "m"),
    ("key-id names a key", ("X-Key-Id", "kid-1"), "kid-1"),
    ("bitbucket event key", ("X-Event-Key", "repo:push"), "repo:push"),
    ("idempotency key", ("Idempotency-Key", "i-1"), "i-1"),
    ("design: no sig word", ("X-Design", "d"), "d"),
    ("signal: no sig word", ("X-Signal", "s"), "s"),
    # --- URL userinfo passwords, anywhere in a value
    ("userinfo", ("Referer", "https://user:pass@h/p"), f"https://user:{R}@h/p"),
    ("userinfo in location", ("Location", "ftp://u:p@h"), f"ftp://u:{R}@h"),
    (
        "userinfo in text",
        ("X-Origin", "from https://u:p@h/a and http://v:q@i"),
        f"from https://u:{R}@h/a and http://v:{R}@i",
    ),
    (
        "userinfo in link header",
        ("Link", '<https://u:p@h/?page=2>; rel="next", <//a:b@c/d>; rel="last"'),
        f'<https://u:{R}@h/?page=2>; rel="next", <//a:{R}@c/d>; rel="last"',
    ),
    ("password with @ runs to the host", ("Location", "https://u:p@ss@h/x"), f"https://u:{R}@h/x"),
    ("empty user", ("Location", "redis://:pw@h:6379"), f"redis://:{R}@h:6379"),
    ("userinfo and query", ("Referer", "https://u:p@h/?token=t"), f"https://u:{R}@h/?token={R}"),
    ("empty password stays empty", ("Location", "https://u:@h"), "https://u:@h"),
    ("user only stays", ("Location", "ssh://git@h/r.git"), "ssh://git@h/r.git"),
    ("port is no password", ("Location", "https://h:8080/p@q"), "https://h:8080/p@q"),
    ("email stays", ("From", "Bot <bot@h.example>"), "Bot <bot@h.example>"),
    # --- parameters: exact short names, whole words, ``key`` as the last word
    ("code param", ("Referer", "https://h/cb?code=c&state=s"), f"https://h/cb?code={R}&state=s"),
    ("pwd param", ("X-Return", "/x?pwd=p"), f"/x?pwd={R}"),
    ("passw param", ("X-Return", "/x?passw=p"), f"/x?passw={R}"),
    ("passwd param", ("X-Return", "/x?passwd=p"), f"/x?passwd={R}"),
    ("pass param", ("X-Return", "/x?user=u&pass=p"), f"/x?user=u&pass={R}"),
    ("k param", ("X-Return", "/x?k=v&kind=push"), f"/x?k={R}&kind=push"),
    ("hmac param", ("Referer", "/install?hmac=ff&shop=s"), f"/install?hmac={R}&shop=s"),
    ("jwt param", ("Referer", "/embed?jwt=eyJ"), f"/embed?jwt={R}"),
    ("sig word param", ("X-Return", "/x?request_sig=s"), f"/x?request_sig={R}"),
    ("subscription-key param", ("X-Return", "/x?subscription-key=k"), f"/x?subscription-key={R}"),
    (
        "camelCase key param",
        ("X-Return", "/x?subscriptionKey=k&eventKey=e"),
        f"/x?subscriptionKey={R}&eventKey=e",
    ),
    ("apikey param", ("X-Return", "/x?apikey=k"), f"/x?apikey={R}"),
    ("identifier keys stay", ("X-Return", "/x?routing_key=a&partitionKey=b&public-key=c"), None),
    ("key id params stay", ("X-Return", "/x?keyId=k1&keyID=k2&key_id=k3"), None),
    (
        "lookalike params stay",
        ("Referer", "/x?monkey=1&design=2&codec=3&kind=4&page=5&sort=6&error_code=7&sort_key=8"),
        "/x?monkey=1&design=2&codec=3&kind=4&page=5&sort=6&error_code=7&sort_key=8",
    ),
    # --- JSON values: secret keys redacted at any depth, compact when something changed
    ("json token", ("X-Meta", '{"token": "abc"}'), f'{{"token":"{R}"}}'),
    (
        "json nested and camelCase",
        ("X-Meta", '{"kind": "push", "id": 7, "auth": {"apiKey": "q", "clientSecret": "s"}}'),
        f'{{"kind":"push","id":7,"auth":"{R}"}}',
    ),
    (
        "json array",
        ("X-Meta", '[{"id": 1, "password": "p"}, {"id": 2, "k": 3}]'),
        f'[{{"id":1,"password":"{R}"}},{{"id":2,"k":"{R}"}}]',
    ),
    (
        "json strings get the value rules",
        ("X-Meta", '{"url": "https://u:p@h/?sig=s"}'),
        f'{{"url":"https://u:{R}@h/?sig={R}"}}',
    ),
    (
        "json inside a json string",
        ("X-Meta", '{"inner": "{\\"token\\": \\"t\\"}"}'),
        '{"inner":"{\\"token\\":\\"' + R + '\\"}"}',
    ),
    (
        "json keeps blank secrets",
        ("X-Meta", '{"token": "", "secret": null, "auth": false, "code": [], "kind": "k"}'),
        '{"token": "", "secret": null, "auth": false, "code": [], "kind": "k"}',
    ),
    (
        "json without secrets keeps its spelling",
        ("X-Meta", ' {"kind": "push",  "id": 7} '),
        ' {"kind": "push",  "id": 7} ',
    ),
    (
        "json non-ascii stays readable",
        ("X-Meta", '{"café": "é", "token": "t"}'),
        f'{{"café":"é","token":"{R}"}}',
    ),
    ("json scalar takes the text rules", ("X-Meta", '"/x?token=t"'), f'"/x?token={R}"'),
    (
        "broken json is left to the other rules",
        ("X-Meta", '{"token": abc, "url": "https://u:p@h/?token=t"'),
        f'{{"token": abc, "url": "https://u:{R}@h/?token={R}"',
    ),
    ("json too deep to walk", ("X-Meta", "[" * 5000 + '{"token": "t"}' + "]" * 5000), R),
    ("json number too long to read", ("X-Meta", '{"token": "t", "n": ' + "1" * 5000 + "}"), R),
    # --- any character: lone surrogates and NUL never raise
    ("lone surrogate", ("X-Title", "caf\udce9"), "caf\udce9"),
    ("nul", ("X-Title", "a\x00b"), "a\x00b"),
    ("lone surrogate in a secret header", ("X-Api-Key", "caf\udce9"), R),
    ("lone surrogate in a name", ("X-T\udce9", "v"), "v"),
    ("nul in a name", ("X-Token\x00", "v"), R),
    ("lone surrogate password", ("Location", "https://u:p\udce9@h"), f"https://u:{R}@h"),
    ("nul param", ("X-Return", "/x?token=a\x00b&q=\x00"), f"/x?token={R}&q=\x00"),
    (
        "json lone surrogate comes back escaped",
        ("X-Meta", '{"a": "\\ud800", "b": "caf\udce9", "token": "t"}'),
        f'{{"a":"\\ud800","b":"caf\\udce9","token":"{R}"}}',
    ),
    (
        "json nul comes back escaped",
        ("X-Meta", '{"a": "\\u0000", "token": "t"}'),
        f'{{"a":"\\u0000","token":"{R}"}}',
    ),
]


@pytest.mark.parametrize(
    "header,expected", [c[1:] for c in HEADER_CASES], ids=[c[0] for c in HEADER_CASES]
)
def test_sanitize_table(header: tuple[str, str], expected: str | None) -> None:
    name, value = header
    assert sanitize_headers([header]) == {name.lower(): value if expected is None else expected}


def test_redacted_json_still_parses() -> None:
    value = sanitize_headers([("X-Meta", '{"a": "\\ud800", "token": {"x": 1}}')])["x-meta"]
    assert json.loads(value) == {"a": "\ud800", "token": R}


NASTY = ["", "\x00", "\udce9", "\ud800", "=", "@", ":", "//", "{", "[", '"', "\\", "token", "é"]


def test_never_raises_on_any_character() -> None:
    # Every pair of nasty pieces, as a name and inside URL, parameter and JSON shapes.
    for a in NASTY:
        for b in NASTY:
            for value in (a + b, f"https://{a}:{b}@h/?{a}={b}", f'{{"{a}": "{b}"}}', f"[{a}{b}"):
                assert isinstance(redact_value(value), str)
                assert sanitize_headers([(a + b or "x", value)])


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
