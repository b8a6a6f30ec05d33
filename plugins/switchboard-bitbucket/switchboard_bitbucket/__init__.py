"""Switchboard preset: the ``bitbucket`` source (Bitbucket Cloud webhooks).

A Bitbucket Cloud webhook with a secret signs each request with ``X-Hub-Signature:
sha256=<hex HMAC-SHA256 of the raw body>``, keyed by the secret as it is. Nothing else is
signed and Bitbucket sends no signed timestamp, so a recorded delivery stays valid: replays
are absorbed by the delivery id, not refused by a clock. Import the webhook's secret with
``webhook create --source bitbucket --secret-file F`` (or let Switchboard mint one and
paste it into Bitbucket).

The delivery id is ``X-Request-UUID`` (one per event request; Bitbucket's retries count up
``X-Attempt-Number``), never ``X-Hook-UUID``, which names the webhook itself. The event
kind is ``X-Event-Key`` (``repo:push``, ``pullrequest:created``, ...). The ``.bitbucket``
projection lifts the repository, the actor, the pushed branch and the pull request for
rules (see :mod:`.projection`).
"""

from __future__ import annotations

from switchboard.plugin import HmacSource, ProjectionRegistry, SourceRegistry, hookimpl

from .projection import BITBUCKET_KEYS, BITBUCKET_PROJECTION, build_bitbucket

__all__ = ["BITBUCKET_KEYS", "SCHEME", "build_bitbucket"]

#: Bitbucket Cloud's scheme ("Manage webhooks": secure webhooks, X-Hub-Signature).
SCHEME = {
    "signature_header": "X-Hub-Signature",
    "signature_prefix": "sha256=",
    "encoding": "hex",
    "signed": "{body}",
    "secret_encoding": "raw",
    "delivery_id": [{"header": "X-Request-UUID"}],
    "kind": [{"header": "X-Event-Key"}],
}


@hookimpl
def switchboard_register_sources(register: SourceRegistry) -> None:
    """Register the ``bitbucket`` source."""
    register.add(HmacSource("bitbucket", SCHEME))


@hookimpl
def switchboard_register_projections(register: ProjectionRegistry) -> None:
    """Fill ``.bitbucket`` for Bitbucket deliveries."""
    register.add(BITBUCKET_PROJECTION)
