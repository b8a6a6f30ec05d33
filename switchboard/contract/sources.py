"""The source contract: a raw delivery in, a verdict out (and optionally out again)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, runtime_checkable

#: Trust modes a source may declare; callers never choose one.
TRUST_SIGNED = "signed"
TRUST_TOKEN = "token"

#: Longest delivery id kept as an idempotency key; longer ones are passed over (never
#: truncated, since two different ids sharing a prefix must not collide) for the next
#: candidate; when none is short enough, the first one's hash (``id-sha256:``) is the key.
MAX_DELIVERY_ID_BYTES = 256

#: The prefix of the ``sha256=<hex>`` signature form many producers send.
SIGNATURE_PREFIX = "sha256="

# --------------------------------------------------------------------------------------
# Refusal reasons: a code per cause, what /metrics' ``reason`` label and the recorded
# refusals show (a source's ``detail`` is its own words, never a label).
# --------------------------------------------------------------------------------------

#: A header the scheme needs is absent (the signature's, or the delivery id it covers).
REASON_MISSING_HEADER = "missing_header"
#: The signature header is there but carries no signature in the scheme's form.
REASON_NO_SIGNATURE = "no_signature"
#: A signature was given and does not match the body under the webhook's secret.
REASON_MISMATCH = "mismatch"
#: The signed timestamp is outside the tolerance (too old or in the future).
REASON_STALE_TIMESTAMP = "stale_timestamp"
#: Two ids the delivery carries disagree (a header's id and the signed body's).
REASON_ID_MISMATCH = "id_mismatch"
#: The delivery presents a secret (a token) that is not the webhook's.
REASON_UNKNOWN_SECRET = "unknown_secret"
#: The signed content cannot be read (not JSON, a required field absent or unparsable).
REASON_MALFORMED = "malformed"
#: The webhook cannot verify anything: no signing secret, an unusable one or scheme.
REASON_MISCONFIGURED = "misconfigured"
#: A refusal that names no code (or one that cannot be a label).
REASON_OTHER = "other"

#: The documented codes, each a ``reason`` label value. A third party may add its own:
#: a source's ``refusal_reasons`` (a tuple of codes) makes them labels too.
REASONS = (
    REASON_MISSING_HEADER,
    REASON_STALE_TIMESTAMP,
    REASON_MISMATCH,
    REASON_NO_SIGNATURE,
    REASON_MALFORMED,
    REASON_MISCONFIGURED,
    REASON_ID_MISMATCH,
    REASON_UNKNOWN_SECRET,
    REASON_OTHER,
)

#: What a code may look like: short snake case (it becomes a label value and a column).
REASON_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,31}")


def reason_code(reason: object) -> str:
    """``reason`` when it is a well-formed code, else ``other`` (never raises)."""
    if isinstance(reason, str) and REASON_PATTERN.fullmatch(reason):
        return reason
    return REASON_OTHER


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
    """One HTTP delivery exactly as received: headers and the raw body bytes.

    ``config`` is the webhook's ``source_config`` (empty when it has none): what a source
    that declares a ``config_schema`` was configured with for this webhook.
    """

    headers: Headers
    body: bytes
    content_type: str | None = None
    config: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Verification:
    """A source's verdict on a delivery.

    ``ok`` False means refuse with 401 and store nothing; ``reason`` is the refusal's code
    (one of :data:`REASONS`, or the source's own from its ``refusal_reasons``; None: ``other``)
    and ``detail`` says why in the source's words (both logged and recorded with the
    webhook's refusals, never echoed to the producer). Build one with :meth:`refuse`.

    ``reply`` (only with ``ok``) answers the producer's handshake instead of ingesting: a
    producer proving the URL before it sends events (Slack's ``url_verification`` echoes
    its ``challenge``). The receiver answers ``200`` with ``reply`` as JSON and stores
    nothing; only a verified delivery may get one, so nobody else can make the URL talk.
    """

    ok: bool
    verified: bool = False
    delivery_id: str | None = None
    kind: str | None = None
    detail: str = ""
    extra: dict[str, object] = field(default_factory=dict)
    reply: dict[str, Any] | None = None
    reason: str | None = None

    @classmethod
    def refuse(cls, *, reason: str, detail: str = "") -> Verification:
        """A refusal with its code; ``detail`` never carries a secret or a MAC."""
        return cls(ok=False, reason=reason, detail=detail)


@runtime_checkable
class Source(Protocol):
    """What ``switchboard_register_sources`` registers.

    A source may also be an :class:`IdentifyingSource` (dry runs then see its kind) and a
    :class:`ProducerSide` (``switchboard send`` can then sign for it).

    A source configured per webhook declares ``config_schema`` (a JSON schema, not None):
    creating a webhook of it then takes a ``source_config`` validated against it (and by
    the source's ``check_config(config)``, when it has one, which raises ``ValueError``
    naming the field), handed to :meth:`verify` as ``delivery.config``.

    A source that refuses with codes of its own (beyond :data:`REASONS`) may list them
    in a ``refusal_reasons`` tuple: they are then ``reason`` labels, not ``other``.
    """

    name: str
    trust_mode: str

    def verify(self, delivery: Delivery, secret: bytes | None, now: float) -> Verification:
        """Verify ``delivery`` with the webhook's signing ``secret`` at time ``now``."""
        ...


@dataclass(frozen=True)
class Identity:
    """What a delivery says it is, read without verifying it.

    ``delivery_id`` is the idempotency key's second half: the producer's id, or the
    body's hash (``switchboard.sources.body_key``) when it carries none. ``kind`` is None
    when the delivery names no event kind.
    """

    kind: str | None
    delivery_id: str


@runtime_checkable
class IdentifyingSource(Protocol):
    """A source that can say what a delivery is without verifying it (optional).

    ``verify()`` reports the same kind and delivery id from the same function, so a
    dry run over a sample (which has no valid signature) sees what the receiver sees.
    """

    name: str

    def identify(self, headers: Headers, body: bytes) -> Identity:
        """The kind and delivery id of ``body`` with ``headers``; never verifies, never raises."""
        ...


@runtime_checkable
class ProducerSide(Protocol):
    """A source that can also produce deliveries (optional): what ``switchboard send`` uses.

    ``sign`` is required. A source may also define
    ``prepare(body, *, stamp: bool, now: float | None) -> bytes``, which returns the body
    its producer would actually send (e.g. with a fresh id and clock stamped in, always
    when ``stamp``, else only where missing; ``now`` defaults to the current time) and
    raises ``ValueError`` when ``body`` cannot be sent; without it the body goes as is.
    """

    name: str

    def sign(self, body: bytes, secret: bytes | None, kind: str | None) -> dict[str, str]:
        """The headers the producer sends with ``body``; unsigned when ``secret`` is empty.

        ``kind`` is the event kind to announce, which a source may ignore.
        """
        ...
