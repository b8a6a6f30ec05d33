"""First-party plugin: the ``generic`` (token-trust) source."""

from __future__ import annotations

from switchboard.plugin import SourceRegistry, hookimpl

from .source import KIND_HEADERS, GenericSource, kind_from_headers

__all__ = ["KIND_HEADERS", "GenericSource", "kind_from_headers"]


@hookimpl
def switchboard_register_sources(register: SourceRegistry) -> None:
    """Register the ``generic`` source."""
    register.add(GenericSource())
