"""Declarative HMAC sources: a producer's signature scheme written as data, not Python.

A :class:`HmacSource` verifies deliveries by a *scheme* (:data:`SCHEME_SCHEMA`): which
header carries the signature and how (entries, prefix, hex or base64), what was signed (a
template over the delivery id, the timestamp and the raw body), where the timestamp, the
delivery id and the event kind are (a header, a JSON pointer into the body, or an entry of
the signature header), and how the secret is encoded. Preset plugins (Standard Webhooks,
Stripe, Slack, ...) fix a scheme; the first-party ``hmac`` source takes one per webhook
(its ``source_config``). Mode ``token`` compares a header with the secret instead (GitLab).

Every refusal says what was wrong (missing header, stale timestamp, no signature matched)
and never echoes a signature or the secret.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator

from .contract.schemaerrors import first_schema_problem
from .routing.envelope import parse_payload
from .sources import (
    REASON_MALFORMED,
    REASON_MISCONFIGURED,
    REASON_MISMATCH,
    REASON_MISSING_HEADER,
    REASON_NO_SIGNATURE,
    REASON_STALE_TIMESTAMP,
    REASON_UNKNOWN_SECRET,
    TRUST_SIGNED,
    Delivery,
    Headers,
    Identity,
    Verification,
    body_key,
    delivery_id_key,
)

_LOCATION: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "minProperties": 1,
    "maxProperties": 1,
    "properties": {
        "header": {
            "type": "string",
            "minLength": 1,
            "maxLength": 128,
            "description": "a request header's value",
        },
        "pointer": {
            "type": "string",
            "pattern": "^(/[^/]*)*$",
            "maxLength": 256,
            "description": "a JSON pointer (RFC 6901) into the body",
        },
        "entry": {
            "type": "string",
            "minLength": 1,
            "maxLength": 32,
            "description": "the entry of the signature header that starts with this",
        },
    },
}

#: What a scheme may say (the ``hmac`` source's ``source_config``, a preset's constant).
SCHEME_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "HMAC source scheme",
    "type": "object",
    "additionalProperties": False,
    "required": ["signature_header"],
    "properties": {
        "mode": {
            "enum": ["hmac", "token"],
            "default": "hmac",
            "description": "hmac: a keyed SHA-256 of the signed content; token: the "
            "header equals the secret",
        },
        "signature_header": {"type": "string", "minLength": 1, "maxLength": 128},
        "signature_separator": {
            "type": "string",
            "minLength": 1,
            "maxLength": 4,
            "description": "the header holds several entries",
        },
        "signature_prefix": {
            "type": "string",
            "maxLength": 32,
            "description": "an entry is a signature when it starts with "
            "this (removed before comparing)",
        },
        "encoding": {"enum": ["hex", "base64"], "default": "hex"},
        "signed": {
            "type": "string",
            "minLength": 6,
            "maxLength": 128,
            "pattern": "^([^{}]|\\{id\\}|\\{t\\}|\\{body\\})*\\{body\\}([^{}]|\\{id\\}|"
            "\\{t\\}|\\{body\\})*$",
            "default": "{body}",
            "description": "what is signed: literal text and {id}, {t}, {body}",
        },
        "secret_encoding": {
            "enum": ["raw", "base64", "whsec_base64"],
            "default": "raw",
            "description": "raw: the secret's bytes are the key; base64: "
            "its decoding; whsec_base64: the decoding of what "
            "follows whsec_ (Standard Webhooks)",
        },
        "timestamp": {**_LOCATION, "description": "where the signed Unix time is"},
        "tolerance_seconds": {"type": "integer", "minimum": 1, "maximum": 86400, "default": 300},
        "delivery_id": {
            "type": "array",
            "items": _LOCATION,
            "maxItems": 4,
            "description": "where the producer's delivery id is (first found)",
        },
        "kind": {
            "type": "array",
            "items": _LOCATION,
            "maxItems": 4,
            "description": "where the event kind is (first found)",
        },
    },
}

_VALIDATOR = Draft202012Validator(SCHEME_SCHEMA)
# ASCII digits only: str.isdigit() also takes "²" and "٣", which int() refuses or reads.
_TIMESTAMP = re.compile("[0-9]{1,12}")
_INDEX = re.compile("[0-9]+")


class SchemeError(ValueError):
    """A scheme that does not validate; the message names the field."""


@dataclass(frozen=True)
class Scheme:
    """A validated scheme (see :data:`SCHEME_SCHEMA`), defaults filled in."""

    signature_header: str
    mode: str = "hmac"
    signature_separator: str | None = None
    signature_prefix: str = ""
    encoding: str = "hex"
    signed: str = "{body}"
    secret_encoding: str = "raw"
    timestamp: Mapping[str, str] | None = None
    tolerance_seconds: int = 300
    delivery_id: Sequence[Mapping[str, str]] = ()
    kind: Sequence[Mapping[str, str]] = ()

    @classmethod
    def from_json(cls, doc: Any) -> Scheme:
        """Validate ``doc``; :class:`SchemeError` names the first wrong field."""
        problem = first_schema_problem(_VALIDATOR.iter_errors(doc))
        if problem is not None:
            raise SchemeError(f"source_config: {problem.where()}: {problem.problem}")
        uses = [
            loc
            for loc in (doc.get("timestamp"), *doc.get("delivery_id", ()), *doc.get("kind", ()))
            if loc and "entry" in loc
        ]
        if uses and not doc.get("signature_separator"):
            raise SchemeError("source_config: an 'entry' location needs signature_separator")
        if "{t}" in doc.get("signed", "") and not doc.get("timestamp"):
            raise SchemeError("source_config: signed: {t} needs a timestamp location")
        if "{id}" in doc.get("signed", "") and not doc.get("delivery_id"):
            raise SchemeError("source_config: signed: {id} needs a delivery_id location")
        fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in doc.items()}
        return cls(**fields)


def _pointer(doc: Any, pointer: str) -> Any:
    """RFC 6901: the value at ``pointer`` in ``doc`` (None when absent)."""
    if pointer == "":
        return doc
    for raw in pointer.split("/")[1:]:
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(doc, dict):
            doc = doc.get(part)
        elif isinstance(doc, list) and _INDEX.fullmatch(part):
            index = int(part)
            doc = doc[index] if index < len(doc) else None
        else:
            return None
    return doc


class _Read:
    """One delivery as a scheme reads it: headers, signature entries, the body's JSON."""

    def __init__(self, scheme: Scheme, headers: Headers, body: bytes) -> None:
        self.scheme = scheme
        self.headers = headers
        self.body = body
        self._doc: Any = ...
        raw = headers.get(scheme.signature_header)
        self.signature_header = raw
        if raw is None:
            self.entries: list[str] = []
        elif scheme.signature_separator:
            self.entries = [e.strip() for e in raw.split(scheme.signature_separator)]
        else:
            self.entries = [raw.strip()]

    def doc(self) -> Any:
        """The body as the envelope's ``.payload`` reads it (the host's one strict parse,
        nesting bounded): None for anything else, never an exception, whatever the bytes."""
        if self._doc is ...:
            self._doc = parse_payload(self.body)
        return self._doc

    def at(self, loc: Mapping[str, str]) -> str | None:
        """The text at one location (numbers read as their decimal form), or None."""
        if "header" in loc:
            value: Any = self.headers.get(loc["header"])
        elif "entry" in loc:
            value = next(
                (e[len(loc["entry"]) :] for e in self.entries if e.startswith(loc["entry"])), None
            )
        else:
            value = _pointer(self.doc(), loc["pointer"])
        if isinstance(value, bool) or value is None:
            return None
        if isinstance(value, int | float):
            value = str(int(value)) if float(value).is_integer() else str(value)
        return value if isinstance(value, str) else None

    def first(self, locations: Sequence[Mapping[str, str]]) -> str | None:
        for loc in locations:
            value = self.at(loc)
            if value:
                return value
        return None

    def delivery_id(self) -> str:
        found = delivery_id_key(self.at(loc) for loc in self.scheme.delivery_id)
        return found or body_key(self.body)

    def signatures(self) -> list[str]:
        prefix = self.scheme.signature_prefix
        return [e[len(prefix) :] for e in self.entries if e and e.startswith(prefix)]


def secret_key(secret: bytes, encoding: str) -> bytes:
    """The HMAC key a secret stands for (ValueError when it does not decode)."""
    if encoding == "raw":
        return secret
    text = secret.decode("ascii", "strict")
    if encoding == "whsec_base64":
        text = text.removeprefix("whsec_")
    text = text.strip()
    try:  # standard or URL-safe alphabet, padded or not
        return base64.b64decode(
            text.replace("-", "+").replace("_", "/") + "=" * (-len(text) % 4), validate=True
        )
    except binascii.Error as exc:
        raise ValueError("the signing secret is not base64") from exc


def _raw(text: str) -> bytes:
    """The bytes a producer sent for ``text``: header bytes that were not UTF-8 come back as
    they arrived; a lone surrogate (a JSON ``\\ud800``) is kept, never an exception."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


def signed_content(template: str, body: bytes, delivery_id: str, timestamp: str) -> bytes:
    """The bytes a scheme signs: the template's text with {id}, {t} and {body} filled in."""
    out = bytearray()
    for part in re.split(r"(\{id\}|\{t\}|\{body\})", template):
        if part == "{body}":
            out += body
        elif part == "{id}":
            out += _raw(delivery_id)
        elif part == "{t}":
            out += _raw(timestamp)
        else:
            out += part.encode()
    return bytes(out)


def _mac(scheme: Scheme, key: bytes, content: bytes) -> str:
    digest = hmac.new(key, content, hashlib.sha256).digest()
    return digest.hex() if scheme.encoding == "hex" else base64.b64encode(digest).decode()


class HmacSource:
    """A source verifying deliveries by a :class:`Scheme`: its own, or the webhook's.

    With ``scheme`` None the scheme is each webhook's ``source_config`` (``config_schema``
    says what it may be), validated when the webhook is created.
    """

    trust_mode = TRUST_SIGNED

    def __init__(self, name: str, scheme: Scheme | Mapping[str, Any] | None = None) -> None:
        self.name = name
        if isinstance(scheme, Mapping):
            scheme = Scheme.from_json(dict(scheme))
        self.scheme = scheme
        #: a source configured per webhook says what its configuration may be
        self.config_schema: dict[str, Any] | None = SCHEME_SCHEMA if scheme is None else None
        self._schemes: dict[str, Scheme] = {}

    def check_config(self, config: Any) -> None:
        """Raise :class:`SchemeError` naming the field when ``config`` is no valid scheme."""
        if self.scheme is None:
            Scheme.from_json(config)

    def _scheme(self, config: Mapping[str, Any]) -> Scheme | None:
        if self.scheme is not None:
            return self.scheme
        text = json.dumps(config, sort_keys=True)
        found = self._schemes.get(text)
        if found is None:
            try:
                found = Scheme.from_json(dict(config))
            except SchemeError:
                return None
            if len(self._schemes) > 256:
                self._schemes.clear()
            self._schemes[text] = found
        return found

    def verify(self, delivery: Delivery, secret: bytes | None, now: float) -> Verification:
        """Check the signature (or token) before anything trusts the body."""
        scheme = self._scheme(delivery.config)
        if scheme is None:
            return Verification.refuse(
                reason=REASON_MISCONFIGURED,
                detail="the webhook's source_config is not a valid scheme",
            )
        if not secret:
            return Verification.refuse(
                reason=REASON_MISCONFIGURED, detail="the webhook has no signing secret"
            )
        read = _Read(scheme, delivery.headers, delivery.body)
        if read.signature_header is None:
            return Verification.refuse(
                reason=REASON_MISSING_HEADER, detail=f"missing {scheme.signature_header} header"
            )
        if scheme.mode == "token":
            token = read.signature_header.strip().encode("utf-8", "replace")
            if not hmac.compare_digest(token, secret):
                return Verification.refuse(
                    reason=REASON_UNKNOWN_SECRET,
                    detail=f"{scheme.signature_header} does not match the secret",
                )
            return self._verified(read)
        stamp = ""
        if scheme.timestamp is not None:
            stamp = read.at(scheme.timestamp) or ""
            if not _TIMESTAMP.fullmatch(stamp):
                return Verification.refuse(
                    reason=REASON_MALFORMED, detail="missing or malformed signature timestamp"
                )
            skew = now - int(stamp)
            if skew > scheme.tolerance_seconds:
                return Verification.refuse(
                    reason=REASON_STALE_TIMESTAMP,
                    detail=f"stale signature timestamp ({int(skew)} s old, tolerance "
                    f"{scheme.tolerance_seconds} s)",
                )
            if -skew > scheme.tolerance_seconds:
                return Verification.refuse(
                    reason=REASON_STALE_TIMESTAMP,
                    detail=f"signature timestamp in the future ({int(-skew)} s ahead, "
                    f"tolerance {scheme.tolerance_seconds} s)",
                )
        given = read.signatures()
        if not given:
            return Verification.refuse(
                reason=REASON_NO_SIGNATURE, detail=f"no signature in {scheme.signature_header}"
            )
        delivery_id = ""
        if "{id}" in scheme.signed:  # else the body is not read before it verifies
            delivery_id = read.first(scheme.delivery_id) or ""
            if not delivery_id:
                return Verification.refuse(
                    reason=REASON_MISSING_HEADER,
                    detail="missing the delivery id the signature covers",
                )
        try:
            key = secret_key(secret, scheme.secret_encoding)
        except ValueError as exc:
            return Verification.refuse(reason=REASON_MISCONFIGURED, detail=str(exc))
        expected = _mac(
            scheme, key, signed_content(scheme.signed, delivery.body, delivery_id, stamp)
        )
        if not any(
            hmac.compare_digest(expected.encode(), g.encode("utf-8", "replace")) for g in given
        ):
            return Verification.refuse(reason=REASON_MISMATCH, detail="signature mismatch")
        return self._verified(read)

    def _verified(self, read: _Read) -> Verification:
        return Verification(
            ok=True,
            verified=True,
            delivery_id=read.delivery_id(),
            kind=read.first(read.scheme.kind),
        )

    def identify(self, headers: Headers, body: bytes) -> Identity:
        """The delivery id and kind a verified delivery would report (a preset's scheme only)."""
        if self.scheme is None:
            return Identity(kind=None, delivery_id=body_key(body))
        read = _Read(self.scheme, headers, body)
        return Identity(kind=read.first(self.scheme.kind), delivery_id=read.delivery_id())

    def sign(
        self,
        body: bytes,
        secret: bytes | None,
        kind: str | None,
        *,
        delivery_id: str | None = None,
        now: float | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> dict[str, str]:
        """The headers this scheme's producer sends with ``body`` (what ``send`` and tests use).

        Header locations are filled (delivery id, kind, timestamp); body locations are the
        body's business. Unsigned when ``secret`` is empty.
        """
        if self.scheme is None and not config:
            raise SchemeError(
                f"the {self.name} source signs with a webhook's own scheme: give it as config"
            )
        scheme = self.scheme or Scheme.from_json(dict(config or {}))
        headers = {"Content-Type": "application/json"}
        ident = delivery_id or str(uuid.uuid4())
        for loc in scheme.delivery_id[:1]:
            if "header" in loc:
                headers[loc["header"]] = ident
        if kind:
            for loc in scheme.kind[:1]:
                if "header" in loc:
                    headers[loc["header"]] = kind
        stamp = str(int(time.time() if now is None else now))
        entries: list[str] = []
        if scheme.timestamp is not None:
            if "header" in scheme.timestamp:
                headers[scheme.timestamp["header"]] = stamp
            elif "entry" in scheme.timestamp:
                entries.append(scheme.timestamp["entry"] + stamp)
        if not secret:
            return headers
        if scheme.mode == "token":
            headers[scheme.signature_header] = secret.decode()
            return headers
        read = _Read(scheme, Headers(headers), body)
        sig_id = read.first(scheme.delivery_id) or ident
        key = secret_key(secret, scheme.secret_encoding)
        entries.append(
            scheme.signature_prefix
            + _mac(scheme, key, signed_content(scheme.signed, body, sig_id, stamp))
        )
        headers[scheme.signature_header] = (scheme.signature_separator or "").join(entries)
        return headers
