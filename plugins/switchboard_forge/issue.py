"""The ``.issue`` projection of a forge's issue event (gitea and github fill it alike)."""

from __future__ import annotations

from typing import Any

from switchboard.plugin import Projection

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


#: The header carrying Gitea's detailed event type (``issue_label``, ``issue_assign`` ...).
GITEA_EVENT_TYPE_HEADER = "x-gitea-event-type"


def build_issue(
    provider: str,
    kinds: frozenset[str],
    kind: str | None,
    payload: Any,
    event_type: str | None = None,
) -> dict[str, Any] | None:
    """The ``.issue`` projection of a forge ``issues`` event, or None when it is not one.

    Pull requests are left out: GitHub and Gitea both describe a PR as an issue with a
    ``pull_request`` member, and a PR rule should not match as an issue rule.
    ``event_type`` is the producer's detailed type when it sends one (Gitea's
    ``X-Gitea-Event-Type``); ``.issue.event_type`` falls back to the event (``kind``).
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
        "event_type": event_type or kind,
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
    """The ``.issue`` projection for one forge, ready for ``switchboard_register_projections``.

    Gitea's detailed event type is a header (``X-Gitea-Event-Type``), read first, as Gitea
    itself does, falling back to the event.
    """

    def build(
        source: str, kind: str | None, payload: Any, headers: dict[str, str] | None = None
    ) -> dict[str, Any] | None:
        # The provider is the forge that registered this projection, not whatever name the
        # caller passes, so ``.issue.key`` stays stable.
        detail = _str((headers or {}).get(GITEA_EVENT_TYPE_HEADER)) if provider == "gitea" else None
        return build_issue(provider, kinds, kind, payload, detail or None)

    return Projection(
        name="issue",
        sources=(provider,),
        keys=ISSUE_KEYS,
        build=build,
        title_key="title",
        actor_key="sender",
        headers=provider == "gitea",
    )


#: A subject's fields: what identifies the issue, never what one event did to it.
SUBJECT_KEYS = ("provider", "repo", "number", "title", "url", "state", "author", "labels")


class IssueSubjects:
    """The forge issue a delivery is about: ``provider:repo#number`` (the ``.issue`` parse)."""

    def __init__(self, provider: str, kinds: frozenset[str]) -> None:
        self.name = f"{provider}-issue"
        self.provider, self.kinds = provider, kinds

    def subject(self, source: str, kind: str | None, payload: Any) -> dict[str, Any] | None:
        if source != self.provider:
            return None
        issue = build_issue(self.provider, self.kinds, kind, payload)
        if issue is None or issue["key"] is None:
            return None
        return {"key": issue["key"], "type": "issue", **{k: issue[k] for k in SUBJECT_KEYS}}
