"""Nudges for this process's triage workers: a delivery just stored pending."""

from __future__ import annotations

import asyncio

#: Set by the receiver, waited on by the workers of this process (service/triage.py).
_BELLS: set[asyncio.Event] = set()


def bell() -> asyncio.Event:
    """A new event a triage worker waits on (it forgets it with :func:`forget`)."""
    event = asyncio.Event()
    _BELLS.add(event)
    return event


def forget(event: asyncio.Event) -> None:
    _BELLS.discard(event)


def wake_triage() -> None:
    """Wake every triage worker of this process (the others poll)."""
    for event in _BELLS:
        event.set()
