"""The ``gitea`` source: ``X-Gitea-Signature`` (bare hex), else ``X-Hub-Signature-256``."""

from __future__ import annotations

import uuid

from switchboard.plugin import (
    REASON_MISCONFIGURED,
    REASON_MISMATCH,
    REASON_MISSING_HEADER,
    SIGNATURE_PREFIX,
    TRUST_SIGNED,
    Delivery,
    Headers,
    Identity,
    Verification,
    constant_time_equal,
    delivery_key,
    first_header,
    hmac_sha256_hex,
    prefixed_signature_matches,
)

GITEA_SIGNATURE = "X-Gitea-Signature"
HUB_SIGNATURE = "X-Hub-Signature-256"
#: Gitea sends both; its own header wins so a proxy that strips X-GitHub-* keeps ids stable.
DELIVERY_HEADERS = ("X-Gitea-Delivery", "X-GitHub-Delivery")
#: The coarse event, in precedence order (Gitea sends the same value in both).
KIND_HEADERS = ("X-GitHub-Event", "X-Gitea-Event")
USER_AGENT = "Go-http-client/1.1"

#: Gitea's detailed event types (``X-Gitea-Event-Type``) and the coarse event it announces
#: for each in ``X-Gitea-Event`` / ``X-GitHub-Event``; unlisted types announce themselves.
_COARSE_EVENT = {
    "issue_label": "issues",
    "issue_assign": "issues",
    "issue_milestone": "issues",
    "pull_request_label": "pull_request",
    "pull_request_assign": "pull_request",
    "pull_request_milestone": "pull_request",
    "pull_request_sync": "pull_request",
    "pull_request_review_request": "pull_request",
    "pull_request_comment": "issue_comment",
}


def bare_signature_matches(given: str | None, secret: bytes, body: bytes) -> bool:
    """Constant-time check of Gitea's bare-hex ``X-Gitea-Signature`` over the raw body bytes."""
    return constant_time_equal(hmac_sha256_hex(secret, body), given)


def identity(headers: Headers, body: bytes) -> Identity:
    """The coarse event (:data:`KIND_HEADERS`) and the id (:data:`DELIVERY_HEADERS`)."""
    return Identity(
        kind=first_header(headers, KIND_HEADERS),
        delivery_id=delivery_key(headers, DELIVERY_HEADERS, body),
    )


class GiteaSource:
    """Verifies Gitea (and Forgejo) webhook deliveries signed with the webhook's secret."""

    name = "gitea"
    trust_mode = TRUST_SIGNED

    def verify(self, delivery: Delivery, secret: bytes | None, now: float) -> Verification:
        """Check the HMAC before anything reads the body; ``now`` is unused (Gitea has no clock)."""
        if not secret:
            return Verification.refuse(
                reason=REASON_MISCONFIGURED, detail="webhook has no signing secret"
            )
        headers = delivery.headers
        bare = headers.get(GITEA_SIGNATURE)
        if bare:
            # When Gitea's own header is present it is the one checked: a wrong bare
            # signature never falls through to a second chance on the hub header.
            checked = GITEA_SIGNATURE
            ok = bare_signature_matches(bare, secret, delivery.body)
        else:
            prefixed = headers.get(HUB_SIGNATURE)
            if not prefixed:
                return Verification.refuse(
                    reason=REASON_MISSING_HEADER,
                    detail=f"missing {GITEA_SIGNATURE} and {HUB_SIGNATURE} headers",
                )
            checked = HUB_SIGNATURE
            ok = prefixed_signature_matches(prefixed, secret, delivery.body)
        if not ok:
            return Verification.refuse(
                reason=REASON_MISMATCH, detail=f"{checked} does not match the body"
            )
        found = identity(headers, delivery.body)
        return Verification(
            ok=True,
            verified=True,
            delivery_id=found.delivery_id,
            kind=found.kind,
            extra={"signature_header": checked.lower()},
        )

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
        """The headers Gitea sends with ``body``; unsigned when ``secret`` is empty.

        ``kind`` may be a coarse event (``issues``) or a detailed type (``issue_label``);
        like Gitea, the coarse one goes in the ``*-Event`` headers, the detail in ``*-Event-Type``.
        """
        delivery = delivery_id or str(uuid.uuid4())
        headers = {
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            "X-Gitea-Delivery": delivery,
            "X-GitHub-Delivery": delivery,
        }
        if kind:
            event = _COARSE_EVENT.get(kind, kind)
            headers.update(
                {
                    "X-Gitea-Event": event,
                    "X-Gitea-Event-Type": kind,
                    "X-GitHub-Event": event,
                    "X-GitHub-Event-Type": kind,
                }
            )
        if secret:
            mac = hmac_sha256_hex(secret, body)
            headers[GITEA_SIGNATURE] = mac
            headers[HUB_SIGNATURE] = SIGNATURE_PREFIX + mac
        return headers
