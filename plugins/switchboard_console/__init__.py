"""First-party plugin: the owners' web console (``/console/…``), server-rendered."""

from __future__ import annotations

from typing import Any

from switchboard.plugin import Runtime, hookimpl


@hookimpl
def switchboard_register_routes(app: Any, runtime: Runtime) -> None:
    """``/console/…``: sign-in with an endpoint token, webhooks, deliveries, rules."""
    from . import views

    views.add_routes(app, runtime)
