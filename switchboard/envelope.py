"""The envelope projection contract (the builder lives in :mod:`switchboard.routing.envelope`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


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
    """

    name: str
    sources: tuple[str, ...]
    keys: tuple[str, ...]
    build: Callable[[str, str | None, Any], dict[str, Any] | None]
    title_key: str | None = None
