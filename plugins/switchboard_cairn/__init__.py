"""First-party plugin: the ``cairn`` source and its ``.artifact`` projection."""

from __future__ import annotations

from typing import Any

from switchboard import hookimpl

from .projection import ARTIFACT_KEYS, ARTIFACT_PROJECTION, build_artifact
from .source import CairnSource

__all__ = ["ARTIFACT_KEYS", "CairnSource", "build_artifact"]


@hookimpl
def switchboard_register_sources(register: Any) -> None:
    """Register the ``cairn`` source."""
    register.add(CairnSource())


@hookimpl
def switchboard_register_projections(register: Any) -> None:
    """Fill ``.artifact`` for Cairn events."""
    register.add(ARTIFACT_PROJECTION)
