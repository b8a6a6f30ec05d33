"""First-party plugin: the ``generic`` (token-trust) source."""

from __future__ import annotations

from typing import Any

from switchboard import hookimpl

from .source import GenericSource

__all__ = ["GenericSource"]


@hookimpl
def switchboard_register_sources(register: Any) -> None:
    """Register the ``generic`` source."""
    register.add(GenericSource())
