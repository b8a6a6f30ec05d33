"""Switchboard: turn verified webhook deliveries into routed work for agent fleets."""

from __future__ import annotations

import pluggy

__version__ = "0.1.0"

#: Decorator plugins use to implement hooks from :mod:`switchboard.hookspecs`.
hookimpl = pluggy.HookimplMarker("switchboard")

__all__ = ["__version__", "hookimpl"]
