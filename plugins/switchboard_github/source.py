"""The ``github`` source: ``X-Hub-Signature-256`` over the raw body, ``X-GitHub-Delivery`` ids."""

from __future__ import annotations

import uuid

from switchboard.forge import (
    delivery_key,
    kind_from_headers,
    prefixed_signature,
    prefixed_signature_refusal,
)
from switchboard.sources import TRUST_SIGNED, Delivery, Headers, Identity, Verification

SIGNATURE_HEADER = "X-Hub-Signature-256"
DELIVERY_HEADERS = ("X-GitHub-Delivery",)
USER_AGENT = "GitHub-Hookshot/switchboard-send"


class GithubSource:
    """Verifies GitHub webhook deliveries signed with the webhook's secret."""

    name = "github"
    trust_mode = TRUST_SIGNED

    def verify(self, delivery: Delivery, secret: bytes | None, now: float) -> Verification:
        """Check the HMAC before anything reads the body; ``now`` is unused (GitHub has no clock)."""
        refusal = prefixed_signature_refusal(delivery, secret, SIGNATURE_HEADER)
        if refusal is not None:
            return refusal
        found = self.identify(delivery.headers, delivery.body)
        return Verification(ok=True, verified=True, delivery_id=found.delivery_id, kind=found.kind)

    def identify(self, headers: Headers, body: bytes) -> Identity:
        """``X-GitHub-Event`` (by the forge header order) and ``X-GitHub-Delivery``."""
        return Identity(
            kind=kind_from_headers(headers),
            delivery_id=delivery_key(headers, DELIVERY_HEADERS, body),
        )

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
            "X-GitHub-Delivery": delivery_id or str(uuid.uuid4()),
        }
        if kind:
            headers["X-GitHub-Event"] = kind
        if secret:
            headers[SIGNATURE_HEADER] = prefixed_signature(secret, body)
        return headers
