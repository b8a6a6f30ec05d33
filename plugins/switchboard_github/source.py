"""The ``github`` source: ``X-Hub-Signature-256`` over the raw body, ``X-GitHub-Delivery`` ids."""

from __future__ import annotations

import uuid

from switchboard.plugin import (
    TRUST_SIGNED,
    Delivery,
    Headers,
    Identity,
    Verification,
    delivery_key,
    prefixed_signature,
    prefixed_signature_refusal,
)

SIGNATURE_HEADER = "X-Hub-Signature-256"
DELIVERY_HEADER = "X-GitHub-Delivery"
EVENT_HEADER = "X-GitHub-Event"
USER_AGENT = "GitHub-Hookshot/switchboard-send"


def identity(headers: Headers, body: bytes) -> Identity:
    """``X-GitHub-Event`` and ``X-GitHub-Delivery`` (else the body's hash)."""
    return Identity(
        kind=headers.get(EVENT_HEADER) or None,
        delivery_id=delivery_key(headers, (DELIVERY_HEADER,), body),
    )


class GithubSource:
    """Verifies GitHub webhook deliveries signed with the webhook's secret."""

    name = "github"
    trust_mode = TRUST_SIGNED

    def verify(self, delivery: Delivery, secret: bytes | None, now: float) -> Verification:
        """Check the HMAC before anything reads the body; ``now`` is unused (GitHub has no clock)."""
        refusal = prefixed_signature_refusal(delivery, secret, SIGNATURE_HEADER)
        if refusal is not None:
            return refusal
        found = identity(delivery.headers, delivery.body)
        return Verification(ok=True, verified=True, delivery_id=found.delivery_id, kind=found.kind)

    def identify(self, headers: Headers, body: bytes) -> Identity:
        """What :meth:`verify` reports, without verifying: see :func:`identity`."""
        return identity(headers, body)

    def sign(
        self,
        body: bytes,
        secret: bytes | None,
        kind: str | None,
        *,
        delivery_id: str | None = None,
    ) -> dict[str, str]:
        """The headers GitHub sends with ``body``; unsigned when ``secret`` is empty."""
        headers = {
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            DELIVERY_HEADER: delivery_id or str(uuid.uuid4()),
        }
        if kind:
            headers[EVENT_HEADER] = kind
        if secret:
            headers[SIGNATURE_HEADER] = prefixed_signature(secret, body)
        return headers
