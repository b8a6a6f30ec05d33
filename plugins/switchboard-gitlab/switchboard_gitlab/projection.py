"""The ``.gitlab`` projection: the project, the ref, the user and the merge request or issue.

GitLab's bodies say what they are in ``object_kind`` (``push``, ``tag_push``,
``merge_request``, ``issue``, ``note``, ``pipeline``, ``build`` ...); events about an
object carry it in ``object_attributes``. A field of another type than GitLab sends reads
as null, so a rule comparing strings never faults on a surprise.
"""

from __future__ import annotations

from typing import Any

from switchboard.plugin import Projection

GITLAB_KEYS = (
    "object_kind",
    "project",
    "project_id",
    "ref",
    "branch",
    "tag",
    "target_branch",
    "commit",
    "deleted",
    "user",
    "iid",
    "title",
    "action",
    "state",
    "draft",
    "labels",
    "url",
)

_HEADS = "refs/heads/"
_TAGS = "refs/tags/"
_NO_COMMIT = "0" * 40


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    # bool is an int in Python but never an id.
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _bool(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _labels(value: Any) -> list[str] | None:
    if not isinstance(value, list):
        return None
    return [title for item in value if (title := _str(_dict(item).get("title"))) is not None]


def _refs(out: dict[str, Any], payload: dict[str, Any], attrs: dict[str, Any]) -> None:
    """``ref`` as sent; ``branch`` or ``tag`` from it (or the object's own fields)."""
    ref = _str(payload.get("ref"))
    tagged = payload.get("tag")
    if ref is None:  # pipelines carry their ref (a short name) in object_attributes
        ref = _str(attrs.get("ref"))
        tagged = attrs.get("tag")
    out["ref"] = ref
    if ref is None:
        out["branch"] = _str(attrs.get("source_branch"))  # merge requests
    elif ref.startswith(_HEADS):
        out["branch"] = ref[len(_HEADS) :]
    elif ref.startswith(_TAGS):
        out["tag"] = ref[len(_TAGS) :]
    elif tagged is True:
        out["tag"] = ref
    else:
        out["branch"] = ref


def build_gitlab(source: str, kind: str | None, payload: Any) -> dict[str, Any] | None:
    """The ``.gitlab`` projection of a GitLab webhook body, or None when it is no object.

    ``title`` is the merge request's or issue's title (a note's: its merge request's or
    issue's), the todo's title; ``user`` the username of who caused the event.
    """
    if not isinstance(payload, dict):
        return None
    project = _dict(payload.get("project"))
    attrs = _dict(payload.get("object_attributes"))
    kind_of = _str(payload.get("object_kind"))
    out: dict[str, Any] = dict.fromkeys(GITLAB_KEYS)
    out["object_kind"] = kind_of
    out["project"] = _str(project.get("path_with_namespace"))
    out["project_id"] = _int(project.get("id"))
    if out["project_id"] is None:
        out["project_id"] = _int(payload.get("project_id"))
    _refs(out, payload, attrs)
    out["target_branch"] = _str(attrs.get("target_branch"))
    if kind_of in ("push", "tag_push"):
        after = _str(payload.get("after"))
        out["commit"] = _str(payload.get("checkout_sha")) or (
            after if after != _NO_COMMIT else None
        )
        out["deleted"] = after == _NO_COMMIT if after is not None else None
    else:
        out["commit"] = (
            _str(_dict(attrs.get("last_commit")).get("id"))
            or _str(attrs.get("sha"))
            or _str(payload.get("sha"))
        )
    out["user"] = _str(payload.get("user_username")) or _str(
        _dict(payload.get("user")).get("username")
    )
    noteable = _dict(payload.get("merge_request")) or _dict(payload.get("issue"))
    subject = noteable if kind_of == "note" else attrs
    out["iid"] = _int(subject.get("iid"))
    out["title"] = _str(subject.get("title"))
    out["action"] = _str(attrs.get("action"))
    out["state"] = (
        _str(attrs.get("state")) or _str(attrs.get("status")) or _str(payload.get("build_status"))
    )
    out["draft"] = _bool(attrs.get("draft"))
    out["labels"] = _labels(payload.get("labels"))
    out["url"] = _str(attrs.get("url")) or _str(project.get("web_url"))
    return out


GITLAB_PROJECTION = Projection(
    name="gitlab",
    sources=("gitlab",),
    keys=GITLAB_KEYS,
    build=build_gitlab,
    title_key="title",
    actor_key="user",
)
