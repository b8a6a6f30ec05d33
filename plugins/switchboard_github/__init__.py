"""First-party plugin: the ``github`` source, its ``.issue`` projection and issue subjects."""

from __future__ import annotations

from switchboard_forge import GITHUB_ISSUE_KINDS, IssueSubjects, issue_projection

from switchboard.plugin import ProjectionRegistry, SourceRegistry, SubjectRegistry, hookimpl

from .source import GithubSource

__all__ = ["GithubSource"]


@hookimpl
def switchboard_register_sources(register: SourceRegistry) -> None:
    """Register the ``github`` source."""
    register.add(GithubSource())


@hookimpl
def switchboard_register_projections(register: ProjectionRegistry) -> None:
    """Fill ``.issue`` for GitHub ``issues`` events."""
    register.add(issue_projection("github", GITHUB_ISSUE_KINDS))


@hookimpl
def switchboard_register_subjects(register: SubjectRegistry) -> None:
    """GitHub issues as subjects: ``github:owner/repo#number``."""
    register.add(IssueSubjects("github", GITHUB_ISSUE_KINDS))
