"""What the gitea and github plugins share: the ``.issue`` projection and subject (a library, no hooks)."""

from __future__ import annotations

from .issue import (
    GITEA_ISSUE_KINDS,
    GITHUB_ISSUE_KINDS,
    ISSUE_KEYS,
    LABEL_ACTIONS,
    IssueSubjects,
    build_issue,
    issue_projection,
)

__all__ = [
    "GITEA_ISSUE_KINDS",
    "GITHUB_ISSUE_KINDS",
    "ISSUE_KEYS",
    "LABEL_ACTIONS",
    "IssueSubjects",
    "build_issue",
    "issue_projection",
]
