"""The ``generic`` source: token trust, where the unguessable ingest URL is the credential."""

from __future__ import annotations

import uuid

from switchboard.forge import delivery_key, kind_from_headers
from switchboard.sources import TRUST_TOKEN, Delivery, Headers, Identity, Verification

#: Delivery id headers in precedence order: the generic conventions (Standard Webhooks'
#: ``Webhook-Id``) first, then the forges', so a forge posting to a generic URL still dedups.
DELIVERY_HEADERS = ("X-Delivery-Id", "Webhook-Id", "X-GitHub-Delivery", "X-Gitea-Delivery")


class GenericSource:
    """Accepts any delivery to its URL; nothing about the body is verified."""

    name = "generic"
    trust_mode = TRUST_TOKEN

    def verify(self, delivery: Delivery, secret: bytes | None, now: float) -> Verification:
        """Always ok and never ``verified``: the receiver already matched the URL's token."""
        found = self.identify(delivery.headers, delivery.body)
        return Verification(ok=True, verified=False, delivery_id=found.delivery_id, kind=found.kind)

    def identify(self, headers: Headers, body: bytes) -> Identity:
        """A forge's kind header if any, and the first id among :data:`DELIVERY_HEADERS`."""
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
        """The headers a generic producer sends: a delivery id, no signature.

        There is no generic header convention for the event kind, so ``kind`` is not sent;
        a caller who wants one names the forge header explicitly (``X-GitHub-Event``).
        """
        return {
            "Content-Type": "application/json",
            "X-Delivery-Id": delivery_id or str(uuid.uuid4()),
        }
