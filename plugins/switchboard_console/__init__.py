"""First-party plugin: the owners' web console (``/console/…``), server-rendered."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from switchboard.plugin import hookimpl

if TYPE_CHECKING:
    # The console is a host surface: its views run the service layer over the host's runtime.
    from switchboard.runtime import Runtime


@hookimpl
def switchboard_config_schema() -> dict[str, Any]:
    """``[plugins.console]``: extra hosts and origins (a proxy's public name)."""
    from .guard import CONFIG_SCHEMA

    return CONFIG_SCHEMA


@hookimpl
def switchboard_check_config(config: dict[str, Any]) -> None:
    """``[plugins.console]`` checked when the config is loaded (every command, and
    ``serve`` before the database or a worker starts), not when a worker builds the routes."""
    from .guard import check_config

    check_config(config)


@hookimpl
def switchboard_register_routes(app: Any, runtime: Runtime) -> None:
    """``/console/…``: sign-in with an endpoint token, webhooks, deliveries, rules."""
    from . import views

    views.add_routes(app, runtime)
