"""First-party plugin: the ``gitea`` source, its ``.issue`` projection and issue subjects."""

from __future__ import annotations

from switchboard_forge import GITEA_ISSUE_KINDS, IssueSubjects, issue_projection

from switchboard.plugin import ProjectionRegistry, SourceRegistry, SubjectRegistry, hookimpl

from .source import GiteaSource

__all__ = ["GiteaSource"]


@hookimpl
def switchboard_register_sources(register: SourceRegistry) -> None:
    """Register the ``gitea`` source."""
    register.add(GiteaSource())


@hookimpl
def switchboard_register_projections(register: ProjectionRegistry) -> None:
    """Fill ``.issue`` for Gitea issue events."""
    register.add(issue_projection("gitea", GITEA_ISSUE_KINDS))


@hookimpl
def switchboard_register_subjects(register: SubjectRegistry) -> None:
    """Gitea issues as subjects: ``gitea:owner/repo#number``."""
    register.add(IssueSubjects("gitea", GITEA_ISSUE_KINDS))
