"""Helpers the first-party sources share: header precedence, signature checks, ``.issue``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .envelope import Projection
from .sources import (
    Delivery,
    Headers,
    Verification,
    body_key,
    constant_time_equal,
    hmac_sha256_hex,
)

#: Longest delivery id kept as an idempotency key; longer ones are ignored (never truncated,
#: since two different ids sharing a prefix must not collide) and the next candidate is used.
MAX_DELIVERY_ID_BYTES = 256

#: Where a kind is read from when the body is not signed for it, in precedence order.
KIND_HEADERS = ("X-GitHub-Event", "X-Gitea-Event", "X-Cairn-Event")

SIGNATURE_PREFIX = "sha256="

#: Gitea's ``X-Gitea-Event`` is coarse (``issues``) and ``X-Gitea-Event-Type`` is the detail
#: (``issue_label``); a rule may be handed either, so both count as issue events.
GITEA_ISSUE_KINDS = frozenset({"issues", "issue_label", "issue_assign", "issue_milestone"})
GITHUB_ISSUE_KINDS = frozenset({"issues"})

#: Actions that change an issue's labels: GitHub names the label, Gitea only updates the list.
LABEL_ACTIONS = frozenset({"labeled", "unlabeled", "label_updated", "label_cleared"})

ISSUE_KEYS = (
    "provider",
    "action",
    "event_type",
    "repo",
    "number",
    "title",
    "url",
    "state",
    "author",
    "sender",
    "labels",
    "label",
    "body_size",
    "label_event",
    "key",
)


def refuse(detail: str) -> Verification:
    """A refusal; ``detail`` is logged and stored, so it never carries a secret or a MAC."""
    return Verification(ok=False, detail=detail)


def usable_delivery_id(value: str | None) -> str | None:
    """``value`` when it can serve as a delivery id: non-empty and at most 256 bytes."""
    if not value or len(value.encode("utf-8", "surrogatepass")) > MAX_DELIVERY_ID_BYTES:
        return None
    return value


def delivery_id_from_headers(headers: Headers, names: Sequence[str]) -> str | None:
    """The first usable delivery id among ``names``, in order; None when there is none."""
    for name in names:
        found = usable_delivery_id(headers.get(name))
        if found is not None:
            return found
    return None


def delivery_key(headers: Headers, names: Sequence[str], body: bytes) -> str:
    """The delivery id from ``names``, else the body's hash (so a retry still dedups)."""
    return delivery_id_from_headers(headers, names) or body_key(body)


def kind_from_headers(headers: Headers) -> str | None:
    """The event kind a producer announced in its headers, by :data:`KIND_HEADERS` order."""
    for name in KIND_HEADERS:
        value = headers.get(name)
        if value:
            return value
    return None


def prefixed_signature(secret: bytes, body: bytes) -> str:
    """The ``sha256=<hex>`` form GitHub, Gitea (hub header) and Cairn send."""
    return SIGNATURE_PREFIX + hmac_sha256_hex(secret, body)


def prefixed_signature_matches(given: str | None, secret: bytes, body: bytes) -> bool:
    """Constant-time check of a ``sha256=<hex>`` header over the raw body bytes."""
    return constant_time_equal(prefixed_signature(secret, body), given)


def prefixed_signature_refusal(
    delivery: Delivery, secret: bytes | None, header: str
) -> Verification | None:
    """None when ``header`` carries ``sha256=<hmac of the raw body>``; else the refusal."""
    if not secret:
        return refuse("webhook has no signing secret")
    given = delivery.headers.get(header)
    if not given:
        return refuse(f"missing {header} header")
    if not prefixed_signature_matches(given, secret, delivery.body):
        return refuse(f"{header} does not match the body")
    return None


def bare_signature_matches(given: str | None, secret: bytes, body: bytes) -> bool:
    """Constant-time check of Gitea's bare-hex ``X-Gitea-Signature`` over the raw body bytes."""
    return constant_time_equal(hmac_sha256_hex(secret, body), given)


# --------------------------------------------------------------------------------------
# The ``.issue`` projection (gitea and github)
# --------------------------------------------------------------------------------------


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    # bool is an int in Python but never an issue number.
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _label_names(labels: Any) -> list[str]:
    if not isinstance(labels, list):
        return []
    return [name for item in labels if (name := _str(_dict(item).get("name"))) is not None]


def build_issue(
    provider: str, kinds: frozenset[str], kind: str | None, payload: Any
) -> dict[str, Any] | None:
    """The ``.issue`` projection of a forge ``issues`` event, or None when it is not one.

    Pull requests are left out: GitHub and Gitea both describe a PR as an issue with a
    ``pull_request`` member, and a PR rule should not match as an issue rule.
    """
    if kind not in kinds or not isinstance(payload, dict):
        return None
    issue = payload.get("issue")
    if not isinstance(issue, dict):
        return None
    if payload.get("pull_request") is not None or issue.get("pull_request") is not None:
        return None
    repo = _str(_dict(payload.get("repository")).get("full_name"))
    number = _int(issue.get("number"))
    if number is None:
        number = _int(payload.get("number"))
    action = _str(payload.get("action"))
    body = _str(issue.get("body")) or ""
    return {
        "provider": provider,
        "action": action,
        "event_type": kind,
        "repo": repo,
        "number": number,
        "title": _str(issue.get("title")),
        "url": _str(issue.get("html_url")),
        "state": _str(issue.get("state")),
        "author": _str(_dict(issue.get("user")).get("login")),
        "sender": _str(_dict(payload.get("sender")).get("login")),
        "labels": _label_names(issue.get("labels")),
        "label": _str(_dict(payload.get("label")).get("name")),
        # surrogatepass: JSON may carry lone surrogates ("\ud800"), which still have a size.
        "body_size": len(body.encode("utf-8", "surrogatepass")),
        "label_event": action in LABEL_ACTIONS,
        "key": f"{provider}:{repo}#{number}" if repo is not None and number is not None else None,
    }


def issue_projection(provider: str, kinds: frozenset[str]) -> Projection:
    """The ``.issue`` projection for one forge, ready for ``switchboard_register_projections``."""

    def build(source: str, kind: str | None, payload: Any) -> dict[str, Any] | None:
        # The provider is the forge that registered this projection, not whatever name the
        # caller passes, so ``.issue.key`` stays stable.
        return build_issue(provider, kinds, kind, payload)

    return Projection(name="issue", sources=(provider,), keys=ISSUE_KEYS, build=build,
                      title_key="title")
