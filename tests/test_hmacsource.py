"""The declarative HMAC engine: what a scheme may say, and what each says about a delivery."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

import pytest

from switchboard.plugin import SCHEME_SCHEMA, HmacSource, Scheme, SchemeError, signed_content
from switchboard.sources import Delivery, Headers, long_id_key

NOW = 1_800_000_000
SECRET = b"s3cret-for-the-engine-tests"


@pytest.mark.parametrize(("doc", "names"), [
    ({}, "signature_header"),
    ({"signature_header": ""}, "signature_header"),
    ({"signature_header": "X", "encoding": "rot13"}, "encoding"),
    ({"signature_header": "X", "signed": "{t}.nobody"}, "signed"),
    ({"signature_header": "X", "signed": "{t}.{body}.{oops}"}, "signed"),
    ({"signature_header": "X", "signed": "{t}.{body}"}, "{t} needs a timestamp"),
    ({"signature_header": "X", "signed": "{id}.{body}"}, "{id} needs a delivery_id"),
    ({"signature_header": "X", "timestamp": {"entry": "t="}}, "signature_separator"),
    ({"signature_header": "X", "timestamp": {"header": "A", "pointer": "/b"}}, "timestamp"),
    ({"signature_header": "X", "delivery_id": [{"pointer": "no-slash"}]}, "delivery_id[0].pointer"),
    ({"signature_header": "X", "tolerance_seconds": 0}, "tolerance_seconds"),
    ({"signature_header": "X", "mode": "md5"}, "mode"),
    ({"signature_header": "X", "unknown": 1}, "unknown: unknown key"),
])  # fmt: skip
def test_a_bad_scheme_is_refused_naming_the_field(doc: dict[str, Any], names: str) -> None:
    with pytest.raises(SchemeError) as err:
        Scheme.from_json(doc)
    assert str(err.value).startswith("source_config: ") and names in str(err.value)


def test_the_schema_is_the_documented_contract() -> None:
    assert SCHEME_SCHEMA["required"] == ["signature_header"]
    assert set(SCHEME_SCHEMA["properties"]) >= {
        "mode",
        "signature_header",
        "signature_separator",
        "signature_prefix",
        "encoding",
        "signed",
        "secret_encoding",
        "timestamp",
        "tolerance_seconds",
        "delivery_id",
        "kind",
    }


def test_signed_content_is_literal_text_and_the_three_placeholders() -> None:
    assert signed_content("v0:{t}:{body}", b"{x}", "i", "12") == b"v0:12:{x}"
    assert signed_content("{id}.{t}.{body}", b"B", "msg", "7") == b"msg.7.B"


def _deliver(
    source: HmacSource,
    headers: dict[str, str],
    body: bytes,
    config: dict[str, Any] | None = None,
    secret: bytes = SECRET,
    now: float = NOW,
) -> Any:
    return source.verify(Delivery(Headers(headers), body, config=config or {}), secret, now)


SCHEME = {
    "signature_header": "Sig",
    "signature_separator": ",",
    "signature_prefix": "v1=",
    "encoding": "base64",
    "signed": "{id}:{t}:{body}",
    "timestamp": {"entry": "t="},
    "tolerance_seconds": 60,
    "delivery_id": [{"header": "Id"}, {"pointer": "/meta/id"}],
    "kind": [{"pointer": "/events/0/kind"}, {"header": "Kind"}],
}


def _sig(body: bytes, ident: str, t: int, key: bytes = SECRET) -> str:
    mac = hmac.new(key, f"{ident}:{t}:".encode() + body, hashlib.sha256).digest()
    return base64.b64encode(mac).decode()


def test_a_per_webhook_scheme_reads_entries_pointers_and_headers() -> None:
    src = HmacSource("hmac")
    body = json.dumps({"meta": {"id": "m-1"}, "events": [{"kind": "order.paid"}]}).encode()
    headers = {"Sig": f"t={NOW}, v1=AAAA, v1={_sig(body, 'm-1', NOW)}"}  # spaces, 2 sigs
    verdict = _deliver(src, headers, body, SCHEME)
    assert verdict.ok and verdict.delivery_id == "m-1" and verdict.kind == "order.paid"
    # a header location wins when present: it is what the signature covers then
    h2 = {"Sig": f"t={NOW},v1={_sig(body, 'h-9', NOW)}", "Id": "h-9", "Kind": "x"}
    verdict = _deliver(src, h2, body, SCHEME)
    assert verdict.ok and verdict.delivery_id == "h-9" and verdict.kind == "order.paid"
    # what the scheme refuses, each with its reason
    assert "stale" in _deliver(src, headers, body, SCHEME, now=NOW + 61).detail
    assert "future" in _deliver(src, headers, body, SCHEME, now=NOW - 61).detail
    assert _deliver(src, headers, body + b" ", SCHEME).detail == "signature mismatch"
    assert _deliver(src, headers, body, SCHEME, secret=b"other").detail == "signature mismatch"
    assert "missing Sig" in _deliver(src, {}, body, SCHEME).detail
    assert "timestamp" in _deliver(src, {"Sig": "v1=AAAA"}, body, SCHEME).detail
    assert "timestamp" in _deliver(src, {"Sig": "t=1e9,v1=AAAA"}, body, SCHEME).detail
    assert "no signature" in _deliver(src, {"Sig": f"t={NOW},v2=AAAA"}, body, SCHEME).detail
    # ... and its code: what /metrics and the recorded refusals show
    reasons = {
        "stale": _deliver(src, headers, body, SCHEME, now=NOW + 61),
        "future": _deliver(src, headers, body, SCHEME, now=NOW - 61),
        "tampered": _deliver(src, headers, body + b" ", SCHEME),
        "wrong secret": _deliver(src, headers, body, SCHEME, secret=b"other"),
        "no header": _deliver(src, {}, body, SCHEME),
        "no timestamp": _deliver(src, {"Sig": "v1=AAAA"}, body, SCHEME),
        "no v1": _deliver(src, {"Sig": f"t={NOW},v2=AAAA"}, body, SCHEME),
        "no secret": _deliver(src, headers, body, SCHEME, secret=b""),
        "bad scheme": _deliver(src, headers, body, {"signature_header": ""}),
    }
    assert {what: v.reason for what, v in reasons.items()} == {
        "stale": "stale_timestamp",
        "future": "stale_timestamp",
        "tampered": "mismatch",
        "wrong secret": "mismatch",
        "no header": "missing_header",
        "no timestamp": "malformed",
        "no v1": "no_signature",
        "no secret": "misconfigured",
        "bad scheme": "misconfigured",
    }
    assert not _deliver(src, headers, body, {"signature_header": 5}).ok  # never a 500
    assert not _deliver(src, headers, body, SCHEME, secret=b"").ok


def test_a_body_that_is_not_json_only_lacks_what_pointers_would_find() -> None:
    src = HmacSource("hmac")
    scheme = {
        "signature_header": "Sig",
        "delivery_id": [{"pointer": "/id"}],
        "kind": [{"pointer": "/type"}],
    }
    body = b"\xff\xfe not json"
    mac = hmac.new(SECRET, body, hashlib.sha256).hexdigest()
    verdict = _deliver(src, {"Sig": mac}, body, scheme)
    assert verdict.ok and verdict.kind is None and verdict.delivery_id  # the body's hash


def test_token_mode_compares_the_header_with_the_secret() -> None:
    src = HmacSource(
        "tok", {"mode": "token", "signature_header": "X-Token", "kind": [{"header": "X-Event"}]}
    )
    ok = _deliver(src, {"X-Token": SECRET.decode(), "X-Event": "Push Hook"}, b"{}")
    assert ok.ok and ok.kind == "Push Hook"
    assert not _deliver(src, {"X-Token": SECRET.decode() + "x"}, b"{}").ok
    assert not _deliver(src, {"X-Token": "é"}, b"{}").ok  # any byte: a refusal, not a 500
    assert src.sign(b"{}", SECRET, "Push Hook")["X-Token"] == SECRET.decode()


@pytest.mark.parametrize(
    "secret",
    [
        b"whsec_" + base64.b64encode(b"k" * 24),
        b"whsec_" + base64.urlsafe_b64encode(b"\xfb" * 24).rstrip(b"="),
    ],
)
def test_whsec_secrets_decode_in_either_alphabet(secret: bytes) -> None:
    src = HmacSource(
        "sw", {"signature_header": "S", "encoding": "base64", "secret_encoding": "whsec_base64"}
    )
    headers = src.sign(b"body", secret, None)
    assert _deliver(src, headers, b"body", secret=secret).ok
    assert "base64" in _deliver(src, headers, b"body", secret=b"whsec_%%%%").detail


def test_sign_then_verify_round_trips_every_location_kind() -> None:
    src = HmacSource("hmac")
    body = json.dumps({"meta": {"id": "m-2"}, "events": [{"kind": "k"}]}).encode()
    headers = src.sign(body, SECRET, None, now=NOW, config=SCHEME, delivery_id="d-7")
    assert headers["Id"] == "d-7" and headers["Sig"].startswith(f"t={NOW},v1=")
    verdict = _deliver(src, headers, body, SCHEME)
    assert verdict.ok and verdict.delivery_id == "d-7" and verdict.kind == "k"


@pytest.mark.parametrize(("body", "body_id"), [
    (b"[" * 3000 + b"]" * 3000, None),  # deeper than Python's recursion limit
    (b'{"meta": {"id": 5e999}, "events": NaN}', None),  # not strict JSON: no payload
    (b'{"meta": {"id": "\\ud800"}}', "\ud800"),  # kept: ids are escaped reversibly later
    (b"\xff\xfe\x00", None),
    # an id too long to keep as it is: keyed by its own hash, never by the body's
    (b'{"meta": {"id": "' + b"x" * 300 + b'"}}', long_id_key("x" * 300)),
])  # fmt: skip
def test_hostile_bodies_are_verified_or_refused_never_raised(
    body: bytes, body_id: str | None
) -> None:
    src = HmacSource("hmac")
    signed = src.sign(body, SECRET, None, now=NOW, config=SCHEME, delivery_id="h-1")
    unsigned = {"Sig": f"t={NOW},v1=AAAA"}
    verdict = _deliver(src, {**signed, "Id": ""}, body, SCHEME)  # the id must come from the body
    assert not verdict.ok  # it signed {id}: the body's id (if any) is not what was signed
    assert not _deliver(src, unsigned, body, SCHEME).ok
    ok = _deliver(src, signed, body, SCHEME)
    assert ok.ok and ok.delivery_id == "h-1" and ok.kind is None
    plain = {
        "signature_header": "S",
        "delivery_id": [{"pointer": "/meta/id"}],
        "kind": [{"pointer": "/events/0/kind"}],
    }
    mac = hmac.new(SECRET, body, hashlib.sha256).hexdigest()
    verdict = _deliver(src, {"S": mac}, body, plain)
    assert verdict.ok and verdict.kind is None
    if body_id is None:
        assert verdict.delivery_id.startswith("sha256:")  # nothing usable: the body's hash
    else:
        assert verdict.delivery_id == body_id


def test_a_header_that_was_not_utf8_is_signed_as_the_bytes_that_arrived() -> None:
    """Sanic hands non-UTF-8 header bytes over surrogate-escaped: they are signed as sent."""
    src = HmacSource("hmac")
    body = b"{}"
    sent = "d-\udcff"  # the byte 0xff, as the receiver sees it
    mac = hmac.new(SECRET, b"d-\xff:" + str(NOW).encode() + b":" + body, hashlib.sha256)
    headers = {"Id": sent, "Sig": f"t={NOW},v1={base64.b64encode(mac.digest()).decode()}"}
    verdict = _deliver(src, headers, body, SCHEME)
    assert verdict.ok and verdict.delivery_id == sent
    assert not _deliver(src, {**headers, "Id": "d-\ud800"}, body, SCHEME).ok  # no exception


@pytest.mark.parametrize("stamp", ["²", "¹²³", "١٧٠٠٠٠٠٠٠٠", "１８００٠٠٠٠٠٠", ""])
def test_a_timestamp_of_other_than_ascii_digits_is_malformed_never_raised(stamp: str) -> None:
    """``str.isdigit()`` takes superscripts and other scripts' digits, which ``int()``
    refuses (an unauthenticated 500) or reads: only ASCII digits are a timestamp."""
    src = HmacSource("hmac")
    body = b'{"meta": {"id": "m-1"}}'
    as_entry = _deliver(src, {"Sig": f"t={stamp},v1={_sig(body, 'm-1', NOW)}"}, body, SCHEME)
    as_header = _deliver(
        src,
        {"Ts": stamp, "Sig": "v0=00"},
        body,
        {"signature_header": "Sig", "signed": "{t}:{body}", "timestamp": {"header": "Ts"}},
    )
    for verdict in (as_entry, as_header):
        assert (verdict.ok, verdict.reason) == (False, "malformed"), verdict
        assert verdict.detail == "missing or malformed signature timestamp"


def test_a_pointer_index_of_other_than_ascii_digits_finds_nothing() -> None:
    src = HmacSource("hmac")
    body = b'{"events": [{"kind": "first"}]}'
    mac = hmac.new(SECRET, body, hashlib.sha256).hexdigest()
    for index, kind in (("0", "first"), ("²", None), ("٠", None)):
        scheme = {"signature_header": "S", "kind": [{"pointer": f"/events/{index}/kind"}]}
        verdict = _deliver(src, {"S": mac}, body, scheme)
        assert verdict.ok and verdict.kind == kind, index


def test_long_delivery_ids_are_keyed_by_their_own_hash() -> None:
    """Two ids over 256 bytes stay two deliveries, and one of them again is the same key."""
    src = HmacSource("hmac")
    scheme = {"signature_header": "S", "delivery_id": [{"header": "Id"}, {"header": "Alt"}]}
    body = b"{}"
    mac = hmac.new(SECRET, body, hashlib.sha256).hexdigest()
    a, b = "a" * 300, "b" * 300
    keys = [_deliver(src, {"S": mac, "Id": i}, body, scheme).delivery_id for i in (a, b, a)]
    assert keys == [long_id_key(a), long_id_key(b), long_id_key(a)]
    assert keys[0].startswith("id-sha256:") and keys[0] != keys[1]
    # a usable id in a later location still wins over a long one
    both = _deliver(src, {"S": mac, "Id": a, "Alt": "short"}, body, scheme)
    assert both.delivery_id == "short"
