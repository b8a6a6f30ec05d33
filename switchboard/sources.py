"""The source contract: a raw delivery in, a verification verdict out."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from typing import Mapping, Protocol, runtime_checkable

from .pgtext import raw_bytes

#: Trust modes a source may declare; callers never choose one.
TRUST_SIGNED = "signed"
TRUST_TOKEN = "token"


class Headers:
    """Case-insensitive, read-only view of a delivery's raw headers."""

    def __init__(self, items: Mapping[str, str] | list[tuple[str, str]]) -> None:
        pairs = list(items.items()) if isinstance(items, Mapping) else list(items)
        self._raw: list[tuple[str, str]] = [(str(k), str(v)) for k, v in pairs]
        self._lower: dict[str, str] = {}
        for k, v in self._raw:
            self._lower.setdefault(k.lower(), v)

    def get(self, name: str, default: str | None = None) -> str | None:
        return self._lower.get(name.lower(), default)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._lower

    def items(self) -> list[tuple[str, str]]:
        return list(self._raw)


@dataclass(frozen=True)
class Delivery:
    """One HTTP delivery exactly as received: headers and the raw body bytes."""

    headers: Headers
    body: bytes
    content_type: str | None = None


@dataclass(frozen=True)
class Verification:
    """A source's verdict on a delivery.

    ``ok`` False means refuse with 401 and store nothing; ``detail`` says why (it is
    logged and stored, never echoed to the producer).
    """

    ok: bool
    verified: bool = False
    delivery_id: str | None = None
    kind: str | None = None
    detail: str = ""
    extra: dict[str, object] = field(default_factory=dict)


@runtime_checkable
class Source(Protocol):
    """What ``switchboard_register_sources`` registers."""

    name: str
    trust_mode: str

    def verify(self, delivery: Delivery, secret: bytes | None, now: float) -> Verification:
        """Verify ``delivery`` with the webhook's signing ``secret`` at time ``now``."""
        ...


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
