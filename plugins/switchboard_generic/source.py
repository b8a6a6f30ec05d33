"""The ``generic`` source: token trust, where the unguessable ingest URL is the credential."""

from __future__ import annotations

import uuid

from switchboard.plugin import (
    TRUST_TOKEN,
    Delivery,
    Headers,
    Identity,
    Verification,
    delivery_key,
    first_header,
)

#: Delivery id headers in precedence order: the generic conventions (Standard Webhooks'
#: ``Webhook-Id``) first, then the forges', so a forge posting to a generic URL still dedups.
DELIVERY_HEADERS = ("X-Delivery-Id", "Webhook-Id", "X-GitHub-Delivery", "X-Gitea-Delivery")

#: Where a kind is read from, in precedence order: there is no generic convention, so the
#: well-known producers' event headers are honoured when one posts to a generic URL.
KIND_HEADERS = ("X-GitHub-Event", "X-Gitea-Event", "X-Cairn-Event")


def kind_from_headers(headers: Headers) -> str | None:
    """The event kind a producer announced in its headers, by :data:`KIND_HEADERS` order."""
    return first_header(headers, KIND_HEADERS)


def identity(headers: Headers, body: bytes) -> Identity:
    """:func:`kind_from_headers` and the first id among :data:`DELIVERY_HEADERS`."""
    return Identity(
        kind=kind_from_headers(headers),
        delivery_id=delivery_key(headers, DELIVERY_HEADERS, body),
    )


class GenericSource:
    """Accepts any delivery to its URL; nothing about the body is verified."""

    name = "generic"
    trust_mode = TRUST_TOKEN

    def verify(self, delivery: Delivery, secret: bytes | None, now: float) -> Verification:
        """Always ok and never ``verified``: the receiver already matched the URL's token."""
        found = identity(delivery.headers, delivery.body)
        return Verification(ok=True, verified=False, delivery_id=found.delivery_id, kind=found.kind)

    def identify(self, headers: Headers, body: bytes) -> Identity:
        """What :meth:`verify` reports: see :func:`identity`."""
        return identity(headers, body)

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
