"""The envelope projection contract (the builder lives in :mod:`switchboard.routing.envelope`)."""

from __future__ import annotations

from collections.abc import Mapping
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
    the event's actor. ``headers`` asks for the delivery's headers as well (see below).
    """

    name: str
    sources: tuple[str, ...]
    keys: tuple[str, ...]
    build: Callable[..., dict[str, Any] | None]
    title_key: str | None = None
    actor_key: str | None = None
    #: When True, ``build`` is also called with ``headers=``: the delivery's sanitized,
    #: lower-cased headers, exactly as persisted (so a dry run over a stored event agrees).
    #: For producers that put the detail in a header (Gitea's ``X-Gitea-Event-Type``).
    headers: bool = False


@runtime_checkable
class SubjectExtractor(Protocol):
    """What ``switchboard_register_subjects`` registers: the thing a delivery is about.

    ``subject`` is pure and parses the verified body in code (never a tenant expression);
    it returns a stable key such as ``gitea:org/repo#12`` or ``cairn:<id>`` (or a mapping
    holding that key under ``"key"`` with the subject's fields), or None when the delivery
    is not about such a thing. The first extractor with an answer wins.
    """

    name: str

    def subject(
        self, source: str, kind: str | None, payload: Any
    ) -> str | Mapping[str, Any] | None:
        """The subject of a delivery from ``source``, or None.

        A bare key, or a mapping with the key under ``"key"`` and the subject's fields
        (what a work order's ``subject`` shows the worker).
        """
        ...
