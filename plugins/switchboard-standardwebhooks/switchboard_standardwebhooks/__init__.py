"""Switchboard preset: the ``standardwebhooks`` source (https://www.standardwebhooks.com).

Producers following the Standard Webhooks spec (Svix, Resend, Clerk, Zapier, ...) send
``webhook-id``, ``webhook-timestamp`` (Unix seconds) and ``webhook-signature``: space-
separated ``v1,<base64 HMAC-SHA256>`` entries (several during the producer's own key
rotation) over ``{id}.{timestamp}.{body}``, keyed by the base64 after ``whsec_`` in the
secret. Import the producer's secret with ``webhook create --source standardwebhooks
--secret-file F``. The event kind is the body's ``type``.
"""

from __future__ import annotations

from switchboard.plugin import HmacSource, SourceRegistry, hookimpl

#: The Standard Webhooks scheme (spec: "Verifying webhooks").
SCHEME = {
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


@hookimpl
def switchboard_register_sources(register: SourceRegistry) -> None:
    """Register the ``standardwebhooks`` source."""
    register.add(HmacSource("standardwebhooks", SCHEME))
