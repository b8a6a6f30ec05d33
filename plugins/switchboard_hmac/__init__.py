"""First-party plugin: the ``hmac`` source, a producer's signature scheme given per webhook.

Create a webhook with ``--source hmac --source-config SCHEME`` (JSON, see
``switchboard.plugin.SCHEME_SCHEMA``) and, for a producer that generates its own secret,
``--secret-file``. Presets for well-known producers (Standard Webhooks, Stripe, Slack,
Shopify, GitLab, Bitbucket) are separate distributions under ``plugins/``.
"""

from __future__ import annotations

from switchboard.plugin import HmacSource, SourceRegistry, hookimpl


@hookimpl
def switchboard_register_sources(register: SourceRegistry) -> None:
    """Register the ``hmac`` source (its scheme is each webhook's ``source_config``)."""
    register.add(HmacSource("hmac"))
