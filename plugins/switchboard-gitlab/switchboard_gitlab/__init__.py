"""Switchboard preset: the ``gitlab`` source (GitLab project and group webhooks).

GitLab signs nothing: it sends the webhook's *secret token* verbatim in ``X-Gitlab-Token``,
and this source compares it with the webhook's secret in constant time (the ``token`` mode
of :class:`switchboard.plugin.HmacSource`). The token proves the sender knows the secret;
it does not cover the body, which only TLS protects. There is no timestamp either: a
replayed delivery is absorbed by its delivery id. Import the token with ``webhook create
--source gitlab --secret-file F`` (or let Switchboard mint one and paste it into GitLab).

The delivery id is ``Idempotency-Key`` (GitLab 17.4+, kept on retries), else
``X-Gitlab-Event-UUID``; the event kind is ``X-Gitlab-Event`` (``Push Hook``,
``Merge Request Hook``, ``Issue Hook``, ...). The ``.gitlab`` projection lifts the project,
the ref, the user and the merge request or issue for rules (see :mod:`.projection`).
"""

from __future__ import annotations

from switchboard.plugin import HmacSource, ProjectionRegistry, SourceRegistry, hookimpl

from .projection import GITLAB_KEYS, GITLAB_PROJECTION, build_gitlab

__all__ = ["GITLAB_KEYS", "SCHEME", "build_gitlab"]

#: GitLab's scheme ("Webhooks": the secret token in X-Gitlab-Token, compared as it is).
SCHEME = {
    "mode": "token",
    "signature_header": "X-Gitlab-Token",
    "delivery_id": [{"header": "Idempotency-Key"}, {"header": "X-Gitlab-Event-UUID"}],
    "kind": [{"header": "X-Gitlab-Event"}],
}


@hookimpl
def switchboard_register_sources(register: SourceRegistry) -> None:
    """Register the ``gitlab`` source."""
    register.add(HmacSource("gitlab", SCHEME))


@hookimpl
def switchboard_register_projections(register: ProjectionRegistry) -> None:
    """Fill ``.gitlab`` for GitLab deliveries."""
    register.add(GITLAB_PROJECTION)
