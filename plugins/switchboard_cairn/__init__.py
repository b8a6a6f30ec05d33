"""First-party plugin: the ``cairn`` source, its ``.artifact`` projection and artifact subjects."""

from __future__ import annotations

from typing import Any

from switchboard.plugin import ProjectionRegistry, SourceRegistry, SubjectRegistry, hookimpl

from .projection import ARTIFACT_KEYS, ARTIFACT_PROJECTION, ArtifactSubjects, build_artifact
from .source import DEFAULT_WINDOW_SECONDS, CairnSource

__all__ = ["ARTIFACT_KEYS", "CONFIG_SCHEMA", "ArtifactSubjects", "CairnSource", "build_artifact"]

#: ``[plugins.cairn]``: how old (or how far ahead) a signed ``created_at`` may be.
CONFIG_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "freshness_seconds": {
            "type": "integer",
            "minimum": 1,
            "maximum": 86400,
            "default": DEFAULT_WINDOW_SECONDS,
            "description": "cairn created_at window, either way of the receiver's clock",
        },
    },
}


@hookimpl
def switchboard_config_schema() -> dict[str, Any]:
    """The schema of ``[plugins.cairn]``."""
    return CONFIG_SCHEMA


@hookimpl
def switchboard_register_sources(register: SourceRegistry, config: dict[str, Any]) -> None:
    """Register the ``cairn`` source with the configured freshness window."""
    register.add(
        CairnSource(window_seconds=config.get("freshness_seconds", DEFAULT_WINDOW_SECONDS))
    )


@hookimpl
def switchboard_register_projections(register: ProjectionRegistry) -> None:
    """Fill ``.artifact`` for Cairn events."""
    register.add(ARTIFACT_PROJECTION)


@hookimpl
def switchboard_register_subjects(register: SubjectRegistry) -> None:
    """Cairn artifacts as subjects: ``cairn:<id>``."""
    register.add(ArtifactSubjects())
