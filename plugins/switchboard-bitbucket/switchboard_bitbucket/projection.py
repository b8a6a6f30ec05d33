"""The ``.bitbucket`` projection: the repository, the actor, the push and the pull request.

Bitbucket Cloud payloads share their entities (``repository``, ``actor``, ``pullrequest``,
``issue``) across events; ``repo:push`` lists the ref ``changes`` it made. A field of
another type than Bitbucket sends reads as null, so a rule comparing strings never faults
on a surprise.
"""

from __future__ import annotations

from typing import Any

from switchboard.plugin import Projection

BITBUCKET_KEYS = (
    "event_key",
    "repository",
    "workspace",
    "actor",
    "actor_nickname",
    "actor_account_id",
    "branch",
    "branches",
    "tag",
    "commit",
    "deleted",
    "forced",
    "pullrequest_id",
    "pullrequest_title",
    "pullrequest_state",
    "destination_branch",
    "title",
    "url",
)

_BRANCH_TYPES = frozenset({"branch", "named_branch"})
_TAG_TYPES = frozenset({"tag", "annotated_tag"})


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    # bool is an int in Python but never a pull request id.
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _bool(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _href(entity: dict[str, Any]) -> str | None:
    return _str(_dict(_dict(entity.get("links")).get("html")).get("href"))


def _push(out: dict[str, Any], push: dict[str, Any]) -> None:
    """``repo:push``: the first ref change names branch (or tag), commit and flags."""
    listed = push.get("changes")
    changes = [c for c in listed if isinstance(c, dict)] if isinstance(listed, list) else []
    names: list[str] = []
    for change in changes:
        ref = _dict(change.get("new")) or _dict(change.get("old"))
        name = _str(ref.get("name"))
        if name is not None and _str(ref.get("type")) in _BRANCH_TYPES and name not in names:
            names.append(name)
    out["branches"] = names
    if not changes:
        return
    first = changes[0]
    new = _dict(first.get("new"))
    ref = new or _dict(first.get("old"))
    name = _str(ref.get("name"))
    if _str(ref.get("type")) in _BRANCH_TYPES:
        out["branch"] = name
    elif _str(ref.get("type")) in _TAG_TYPES:
        out["tag"] = name
    out["commit"] = _str(_dict(new.get("target")).get("hash"))
    out["deleted"] = _bool(first.get("closed"))
    out["forced"] = _bool(first.get("forced"))
    out["url"] = _href(first)


def build_bitbucket(source: str, kind: str | None, payload: Any) -> dict[str, Any] | None:
    """The ``.bitbucket`` projection of a Bitbucket Cloud event body, or None when no object.

    ``branch`` is the pushed branch (the first ref change; ``branches`` lists them all) or
    a pull request's source branch; ``title`` is the pull request's or issue's title (the
    todo's title); ``url`` its web page, else the push's or the repository's.
    """
    if not isinstance(payload, dict):
        return None
    repository = _dict(payload.get("repository"))
    actor = _dict(payload.get("actor"))
    full_name = _str(repository.get("full_name"))
    workspace = _str(_dict(repository.get("workspace")).get("slug"))
    if workspace is None and full_name and "/" in full_name:
        workspace = full_name.split("/", 1)[0]
    out: dict[str, Any] = dict.fromkeys(BITBUCKET_KEYS)
    out.update(
        {
            "event_key": kind or None,
            "repository": full_name,
            "workspace": workspace,
            "actor": _str(actor.get("display_name")),
            "actor_nickname": _str(actor.get("nickname")),
            "actor_account_id": _str(actor.get("account_id")),
        }
    )
    push = payload.get("push")
    if isinstance(push, dict):
        _push(out, push)
    pullrequest = payload.get("pullrequest")
    if isinstance(pullrequest, dict):
        src = _dict(pullrequest.get("source"))
        out.update(
            {
                "pullrequest_id": _int(pullrequest.get("id")),
                "pullrequest_title": _str(pullrequest.get("title")),
                "pullrequest_state": _str(pullrequest.get("state")),
                "branch": _str(_dict(src.get("branch")).get("name")),
                "commit": _str(_dict(src.get("commit")).get("hash")),
                "destination_branch": _str(
                    _dict(_dict(pullrequest.get("destination")).get("branch")).get("name")
                ),
                "title": _str(pullrequest.get("title")),
                "url": _href(pullrequest),
            }
        )
    issue = payload.get("issue")
    if isinstance(issue, dict) and not isinstance(pullrequest, dict):
        out["title"] = _str(issue.get("title"))
        out["url"] = _href(issue)
    out["url"] = out["url"] or _href(repository)
    return out


BITBUCKET_PROJECTION = Projection(
    name="bitbucket",
    sources=("bitbucket",),
    keys=BITBUCKET_KEYS,
    build=build_bitbucket,
    title_key="title",
    actor_key="actor",
)
