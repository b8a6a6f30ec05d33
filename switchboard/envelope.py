"""The envelope projection contract (the builder lives in :mod:`switchboard.routing.envelope`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol, runtime_checkable


@dataclass(frozen=True)
class Projection:
    """A top-level envelope key (``artifact``, ``issue``) contributed for some sources.

    Several plugins may contribute the same ``name`` for different ``sources`` (gitea
    and github both fill ``.issue``); the pair is unique.  ``build(source, kind,
    payload)`` is pure; it returns a dict (keys outside ``keys`` are ignored, missing
    ones become null) or None when the delivery is not about such a thing.

    ``title_key`` names the key whose non-empty string titles the todos of a delivery
    (``title`` for ``.issue`` and ``.artifact``); the first projection of the source,
    in registration order, that offers one wins, else the title is source and kind.
    ``actor_key`` likewise names the key holding who caused the delivery (``actor_id``
    for ``.artifact``, ``sender`` for ``.issue``): what an LLM triage prompt shows as
    the event's actor.
    """

    name: str
    sources: tuple[str, ...]
    keys: tuple[str, ...]
    build: Callable[[str, str | None, Any], dict[str, Any] | None]
    title_key: str | None = None
    actor_key: str | None = None


@runtime_checkable
class SubjectExtractor(Protocol):
    """What ``switchboard_register_subjects`` registers: the thing a delivery is about.

    ``subject`` is pure and parses the verified body in code (never a tenant expression);
    it returns a stable key such as ``gitea:org/repo#12`` or ``cairn:<id>``, or None when
    the delivery is not about such a thing.
    """

    name: str

    def subject(self, source: str, kind: str | None, payload: Any) -> str | None:
        """The subject key of a delivery from ``source``, or None."""
        ...
