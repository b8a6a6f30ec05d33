"""A started rules sandbox for a test: the config's defaults, or these ``[plugins.rules]``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from switchboard_rules.sandbox import Limits, Sandbox
from switchboard_rules.stage import DEFAULTS


@asynccontextmanager
async def sandbox(*, sweep_ms: int = 0, **kw: Any) -> AsyncIterator[Sandbox]:
    """A started sandbox with the config's defaults, or these ``[plugins.rules]`` values.

    ``sweep_ms``: a sweep's alarm of the test's choosing (see :class:`Sandbox`).
    """
    sb = Sandbox(Limits.from_config({**DEFAULTS, **kw}), sweep_ms=sweep_ms)
    await sb.start()
    try:
        yield sb
    finally:
        await sb.close()
