"""The ``.artifact`` projection of a Cairn event: the fields routing rules usually need."""

from __future__ import annotations

from typing import Any

from switchboard.plugin import Projection

#: Root fields of the event.
_ROOT_KEYS = ("event_id", "kind", "created_at")
#: String fields of ``data``; a non-string value is treated as absent so rules comparing
#: strings never fault on a producer's surprise.
_DATA_STRINGS = (
    "id",
    "url",
    "title",
    "share_type",
    "channel",
    "model",
    "actor_id",
    "on_behalf_of",
    "expires_at",
)

ARTIFACT_KEYS = (*_ROOT_KEYS, *_DATA_STRINGS, "tags", "metadata", "handle")


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def build_artifact(source: str, kind: str | None, payload: Any) -> dict[str, Any] | None:
    """The ``.artifact`` projection of a Cairn event body, or None when it is not an object."""
    if not isinstance(payload, dict):
        return None
    data = payload.get("data")
    data = data if isinstance(data, dict) else {}
    out: dict[str, Any] = {key: _str(payload.get(key)) for key in _ROOT_KEYS}
    out.update({key: _str(data.get(key)) for key in _DATA_STRINGS})
    tags = data.get("tags")
    # Tags pass through as Cairn sends them: null until present, never invented.
    out["tags"] = tags if isinstance(tags, list) else None
    metadata = data.get("metadata")
    # Cairn does not send metadata today; the key is reserved so rules can test for it.
    out["metadata"] = metadata if isinstance(metadata, dict) else None
    out["handle"] = f"mcp://cairn/{out['id']}" if out["id"] else None
    return out


ARTIFACT_PROJECTION = Projection(
    name="artifact",
    sources=("cairn",),
    keys=ARTIFACT_KEYS,
    build=build_artifact,
    title_key="title",
    actor_key="actor_id",
)


class ArtifactSubjects:
    """The Cairn artifact an ``artifact.created`` event is about: ``cairn:<id>``.

    Parsed from the signed body. Tags keep their string entries only; every field but the
    key is producer text (a work order says so).
    """

    name = "cairn-artifact"

    def subject(self, source: str, kind: str | None, payload: Any) -> dict[str, Any] | None:
        if source != "cairn" or kind != "artifact.created":
            return None
        artifact = build_artifact(source, kind, payload)
        if artifact is None or not artifact["id"]:
            return None
        tags = [t for t in artifact["tags"] or () if isinstance(t, str)]
        return {
            "key": f"cairn:{artifact['id']}",
            "type": "artifact",
            "id": artifact["id"],
            "handle": artifact["handle"],
            "share_type": artifact["share_type"],
            "actor_id": artifact["actor_id"],
            "on_behalf_of": artifact["on_behalf_of"],
            "tags": tags,
            "title": artifact["title"],
            "url": artifact["url"],
        }
