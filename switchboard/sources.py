"""Helpers for sources: identity, signatures, refusals and delivery ids.

The source contract itself (``Source``, ``Delivery``, ``Verification`` ...) lives in
:mod:`switchboard.contract.sources` and is re-exported here.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Sequence

from .contract.sources import (
    MAX_DELIVERY_ID_BYTES,
    REASON_ID_MISMATCH,
    REASON_MALFORMED,
    REASON_MISCONFIGURED,
    REASON_MISMATCH,
    REASON_MISSING_HEADER,
    REASON_NO_SIGNATURE,
    REASON_OTHER,
    REASON_STALE_TIMESTAMP,
    REASON_UNKNOWN_SECRET,
    REASONS,
    SIGNATURE_PREFIX,
    TRUST_SIGNED,
    TRUST_TOKEN,
    Delivery,
    Headers,
    IdentifyingSource,
    Identity,
    ProducerSide,
    Source,
    Verification,
    reason_code,
)
from .pgtext import key_text, raw_bytes

__all__ = [
    "MAX_DELIVERY_ID_BYTES",
    "REASONS",
    "REASON_ID_MISMATCH",
    "REASON_MALFORMED",
    "REASON_MISCONFIGURED",
    "REASON_MISMATCH",
    "REASON_MISSING_HEADER",
    "REASON_NO_SIGNATURE",
    "REASON_OTHER",
    "REASON_STALE_TIMESTAMP",
    "REASON_UNKNOWN_SECRET",
    "SIGNATURE_PREFIX",
    "TRUST_SIGNED",
    "TRUST_TOKEN",
    "Delivery",
    "Headers",
    "IdentifyingSource",
    "Identity",
    "ProducerSide",
    "Source",
    "Verification",
    "reason_code",
]


def identify(source: object, headers: Headers, body: bytes) -> Identity:
    """``source``'s identity for a delivery, or no kind and the body's hash without ``identify``."""
    if isinstance(source, IdentifyingSource):
        return source.identify(headers, body)
    return Identity(kind=None, delivery_id=body_key(body))


def producer_side(source: object) -> ProducerSide | None:
    """``source`` when it can sign deliveries on its own, else None.

    A source configured per webhook (``config_schema``) signs only with a webhook's
    configuration, which ``switchboard send`` does not have: it is no producer side here.
    """
    if getattr(source, "config_schema", None) is not None:
        return None
    return source if isinstance(source, ProducerSide) else None


def prepare_body(
    producer: ProducerSide, body: bytes, *, stamp: bool, now: float | None = None
) -> bytes:
    """``body`` as ``producer`` would send it (see :class:`ProducerSide`); raises ``ValueError``."""
    prepare = getattr(producer, "prepare", None)
    if prepare is None:
        return body
    prepared: bytes = prepare(body, stamp=stamp, now=now)
    return prepared


def hmac_sha256_hex(secret: bytes, body: bytes) -> str:
    """Lower-case hex HMAC-SHA256 of ``body`` keyed with ``secret``."""
    return hmac.new(secret, body, hashlib.sha256).hexdigest()


def constant_time_equal(expected: str, given: str | None) -> bool:
    """Compare two header values in constant time over their bytes.

    Either side may hold what UTF-8 cannot encode (a header's raw non-UTF-8 bytes arrive
    surrogate-escaped; a JSON body can carry a lone surrogate): compared as raw bytes,
    never raising.
    """
    return hmac.compare_digest(raw_bytes(expected), raw_bytes(given or ""))


def body_key(body: bytes) -> str:
    """The idempotency key of a delivery that carries no delivery id."""
    return "sha256:" + hashlib.sha256(body).hexdigest()


#: The key of a delivery id over :data:`MAX_DELIVERY_ID_BYTES` starts so: a prefix of its
#: own, so the hash of an id and the hash of a body (:func:`body_key`) never meet.
LONG_ID_PREFIX = "id-sha256:"


def long_id_key(value: str) -> str:
    """The key of a delivery id too long to keep: its hash (never truncated, since two ids
    sharing a prefix must not collide), so a retry of it still dedups. Hashed in its
    one-to-one escaped form, so ids that differ by a byte PostgreSQL cannot hold differ."""
    return LONG_ID_PREFIX + hashlib.sha256(key_text(value).encode()).hexdigest()


# --------------------------------------------------------------------------------------
# Helpers for source authors: refusals, delivery ids, header precedence, signatures
# --------------------------------------------------------------------------------------


def refuse(detail: str, *, reason: str | None = None) -> Verification:
    """A refusal; ``reason`` its code (``Verification.refuse``; None counts as ``other``).

    ``detail`` is logged and recorded, so it never carries a secret or a MAC.
    """
    return Verification(ok=False, detail=detail, reason=reason)


def usable_delivery_id(value: str | None) -> str | None:
    """``value`` when it can serve as a delivery id: non-empty and at most 256 bytes."""
    if not value or len(value.encode("utf-8", "surrogatepass")) > MAX_DELIVERY_ID_BYTES:
        return None
    return value


def first_header(headers: Headers, names: Sequence[str]) -> str | None:
    """The first non-empty value among the headers ``names``, in order; None when there is none."""
    for name in names:
        value = headers.get(name)
        if value:
            return value
    return None


def delivery_id_from_headers(headers: Headers, names: Sequence[str]) -> str | None:
    """The first usable delivery id among ``names``, in order; None when there is none."""
    for name in names:
        found = usable_delivery_id(headers.get(name))
        if found is not None:
            return found
    return None


def delivery_id_key(candidates: Iterable[str | None]) -> str | None:
    """The key of the first usable delivery id among ``candidates`` (in precedence order);
    when every one given is too long, the first one's :func:`long_id_key`; None when none
    is given. Read lazily: a later candidate (a body pointer) is not read once one is kept.

    A producer that sent an id is never keyed by its body: two deliveries with distinct
    long ids and the same body would be merged into one.
    """
    too_long: str | None = None
    for value in candidates:
        if usable_delivery_id(value) is not None:
            return value
        if value and too_long is None:
            too_long = value
    return None if too_long is None else long_id_key(too_long)


def delivery_key(headers: Headers, names: Sequence[str], body: bytes) -> str:
    """The delivery id from ``names`` (see :func:`delivery_id_key`), else the body's hash
    (so a retry still dedups)."""
    return delivery_id_key(headers.get(name) for name in names) or body_key(body)


def prefixed_signature(secret: bytes, body: bytes) -> str:
    """The ``sha256=<hex>`` form of the HMAC-SHA256 of ``body``."""
    return SIGNATURE_PREFIX + hmac_sha256_hex(secret, body)


def prefixed_signature_matches(given: str | None, secret: bytes, body: bytes) -> bool:
    """Constant-time check of a ``sha256=<hex>`` header over the raw body bytes."""
    return constant_time_equal(prefixed_signature(secret, body), given)


def prefixed_signature_refusal(
    delivery: Delivery, secret: bytes | None, header: str
) -> Verification | None:
    """None when ``header`` carries ``sha256=<hmac of the raw body>``; else the refusal."""
    if not secret:
        return refuse("webhook has no signing secret", reason=REASON_MISCONFIGURED)
    given = delivery.headers.get(header)
    if not given:
        return refuse(f"missing {header} header", reason=REASON_MISSING_HEADER)
    if not prefixed_signature_matches(given, secret, delivery.body):
        return refuse(f"{header} does not match the body", reason=REASON_MISMATCH)
    return None
