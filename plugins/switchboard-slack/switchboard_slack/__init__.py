"""Switchboard preset: the ``slack`` source (Slack's "Verifying requests from Slack").

Slack signs every request it sends (Events API, slash commands, interactivity) with
``X-Slack-Request-Timestamp`` (Unix seconds) and ``X-Slack-Signature: v0=<hex>``: the hex
HMAC-SHA256 over ``v0:{timestamp}:{body}``, keyed by the app's signing secret (its bytes
as they are). One signature per request; timestamps more than 5 minutes away from the
receiver's clock are refused. Import the app's signing secret with ``webhook create
--source slack --secret-file F``.

Events API deliveries are JSON: the delivery id is their ``event_id`` (the same on Slack's
retries) and the kind is ``event.type`` (``app_mention``), else the envelope's ``type``
(``url_verification``). Slash commands and interactivity payloads are form-encoded: they
have neither, so their idempotency key is the body's hash and their kind is null.

The ``.slack`` projection gives rules an Events API delivery's handy fields
(``.slack.event_type``, ``.slack.channel``, ``.slack.user``, ...); it is null for a
form-encoded body, whose ``.payload`` is null too.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from switchboard.plugin import (
    Delivery,
    HmacSource,
    Projection,
    ProjectionRegistry,
    SourceRegistry,
    Verification,
    hookimpl,
)

__all__ = ["SCHEME", "SLACK_KEYS", "SLACK_PROJECTION", "SlackSource", "build_slack"]

#: Slack's scheme (docs.slack.dev/authentication/verifying-requests-from-slack).
SCHEME = {
    "signature_header": "X-Slack-Signature",
    "signature_prefix": "v0=",
    "encoding": "hex",
    "signed": "v0:{t}:{body}",
    "secret_encoding": "raw",
    "timestamp": {"header": "X-Slack-Request-Timestamp"},
    "tolerance_seconds": 300,
    "delivery_id": [{"pointer": "/event_id"}],
    "kind": [{"pointer": "/event/type"}, {"pointer": "/type"}],
}

#: What ``.slack`` holds (null when the delivery does not say).
SLACK_KEYS = (
    "type",  # the envelope: event_callback, url_verification, app_rate_limited
    "event_id",  # Ev...
    "event_time",  # Unix seconds
    "team_id",  # T...
    "enterprise_id",  # E... (Enterprise Grid), else null
    "api_app_id",  # A...
    "event_type",  # event.type: app_mention, message, reaction_added, ...
    "event_subtype",  # event.subtype: bot_message, message_changed, ...
    "channel",  # C.../G.../D... (the id, also when Slack sends a channel object)
    "channel_type",  # channel, group, im, mpim
    "user",  # U... who caused it (the id, also when Slack sends a user object)
    "bot_id",  # B... when a bot posted it
    "text",  # the message text, for message-like events
    "ts",  # the message's ts
    "thread_ts",  # the thread's parent ts, for replies
)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _id(value: Any) -> str | None:
    """An id Slack sends either bare (``"C123"``) or as an object (``{"id": "C123", ...}``)."""
    return _str(value) or _str(_dict(value).get("id"))


def build_slack(source: str, kind: str | None, payload: Any) -> dict[str, Any] | None:
    """The ``.slack`` projection of an Events API delivery, or None for any other body.

    ``payload`` is the parsed JSON body: a form-encoded body (slash commands,
    interactivity) parses to None, and so does this projection.
    """
    if not isinstance(payload, dict):
        return None
    event = _dict(payload.get("event"))
    item = _dict(event.get("item"))  # reaction_added and friends point at a message
    return {
        "type": _str(payload.get("type")),
        "event_id": _str(payload.get("event_id")),
        "event_time": _int(payload.get("event_time")),
        "team_id": _str(payload.get("team_id")),
        "enterprise_id": _str(payload.get("enterprise_id")),
        "api_app_id": _str(payload.get("api_app_id")),
        "event_type": _str(event.get("type")),
        "event_subtype": _str(event.get("subtype")),
        "channel": _id(event.get("channel")) or _id(item.get("channel")),
        "channel_type": _str(event.get("channel_type")),
        "user": _id(event.get("user")),
        "bot_id": _str(event.get("bot_id")),
        "text": _str(event.get("text")),
        "ts": _str(event.get("ts")),
        "thread_ts": _str(event.get("thread_ts")),
    }


SLACK_PROJECTION = Projection(
    name="slack",
    sources=("slack",),
    keys=SLACK_KEYS,
    build=build_slack,
    actor_key="user",
)


class SlackSource(HmacSource):
    """Slack's scheme, and the Events API's URL handshake answered once verified."""

    def __init__(self) -> None:
        super().__init__("slack", SCHEME)

    def verify(self, delivery: Delivery, secret: bytes | None, now: float) -> Verification:
        """Verify; a verified ``url_verification`` is answered with its ``challenge``."""
        verdict = super().verify(delivery, secret, now)
        if not verdict.ok or verdict.kind != "url_verification":
            return verdict
        try:
            doc = json.loads(delivery.body)
        except (ValueError, UnicodeDecodeError):
            return verdict
        challenge = doc.get("challenge") if isinstance(doc, dict) else None
        if not isinstance(challenge, str) or len(challenge) > 512:
            return verdict
        return replace(verdict, reply={"challenge": challenge})


@hookimpl
def switchboard_register_sources(register: SourceRegistry) -> None:
    """Register the ``slack`` source."""
    register.add(SlackSource())


@hookimpl
def switchboard_register_projections(register: ProjectionRegistry) -> None:
    """Fill ``.slack`` for Slack's Events API deliveries."""
    register.add(SLACK_PROJECTION)
