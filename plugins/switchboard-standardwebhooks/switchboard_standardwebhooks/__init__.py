"""Switchboard preset: the ``standardwebhooks`` source (https://www.standardwebhooks.com).

Producers following the Standard Webhooks spec (Svix, Resend, Clerk, Zapier, ...) send
``webhook-id``, ``webhook-timestamp`` (Unix seconds) and ``webhook-signature``: space-
separated ``v1,<base64 HMAC-SHA256>`` entries (several during the producer's own key
rotation) over ``{id}.{timestamp}.{body}``, keyed by the base64 after ``whsec_`` in the
secret. Svix-branded deliveries (Svix itself, and Clerk and Resend, which send through it)
carry the same three as ``svix-id``, ``svix-timestamp`` and ``svix-signature``: both header
families verify. Import the producer's secret with ``webhook create --source
standardwebhooks --secret-file F``. The event kind is the body's ``type``.
"""

from __future__ import annotations

from typing import Any

from switchboard.plugin import (
    Delivery,
    Headers,
    HmacSource,
    Identity,
    SourceRegistry,
    Verification,
    hookimpl,
)

#: The Standard Webhooks scheme (spec: "Verifying webhooks").
SCHEME: dict[str, Any] = {
    "signature_header": "webhook-signature",
    "signature_separator": " ",
    "signature_prefix": "v1,",
    "encoding": "base64",
    "signed": "{id}.{t}.{body}",
    "secret_encoding": "whsec_base64",
    "timestamp": {"header": "webhook-timestamp"},
    "tolerance_seconds": 300,
    "delivery_id": [{"header": "webhook-id"}],
    "kind": [{"pointer": "/type"}],
}

#: The same scheme under Svix's header names (the official ``svix`` library sends these).
SVIX_SCHEME: dict[str, Any] = {
    **SCHEME,
    "signature_header": "svix-signature",
    "timestamp": {"header": "svix-timestamp"},
    "delivery_id": [{"header": "svix-id"}],
}


class StandardWebhooksSource(HmacSource):
    """Standard Webhooks' headers, or Svix's brand of them when only those are present."""

    def __init__(self) -> None:
        super().__init__("standardwebhooks", SCHEME)
        self._svix = HmacSource("standardwebhooks", SVIX_SCHEME)

    @staticmethod
    def _svix_branded(headers: Headers) -> bool:
        # A delivery carrying the spec's own signature header is read as the spec's, whatever
        # else it carries: one family per delivery, never a mix of the two.
        return "webhook-signature" not in headers and "svix-signature" in headers

    def verify(self, delivery: Delivery, secret: bytes | None, now: float) -> Verification:
        """Verify by whichever header family the delivery carries."""
        if self._svix_branded(delivery.headers):
            return self._svix.verify(delivery, secret, now)
        return super().verify(delivery, secret, now)

    def identify(self, headers: Headers, body: bytes) -> Identity:
        """The delivery id and kind, read from the family the delivery carries."""
        if self._svix_branded(headers):
            return self._svix.identify(headers, body)
        return super().identify(headers, body)


@hookimpl
def switchboard_register_sources(register: SourceRegistry) -> None:
    """Register the ``standardwebhooks`` source."""
    register.add(StandardWebhooksSource())
