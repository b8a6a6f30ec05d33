"""First-party plugin: the ``github`` source and its ``.issue`` projection."""

from __future__ import annotations

from typing import Any

from switchboard import hookimpl
from switchboard.forge import GITHUB_ISSUE_KINDS, issue_projection

from .source import GithubSource

__all__ = ["GithubSource"]


@hookimpl
def switchboard_register_sources(register: Any) -> None:
    """Register the ``github`` source."""
    register.add(GithubSource())


@hookimpl
def switchboard_register_projections(register: Any) -> None:
    """Fill ``.issue`` for GitHub ``issues`` events."""
    register.add(issue_projection("github", GITHUB_ISSUE_KINDS))
