"""First-party plugin: the MCP agent surface (streamable HTTP at /mcp, and stdio)."""

from __future__ import annotations

import inspect
import sys
from typing import Any

from switchboard import hookimpl, hostcheck
from switchboard.registry import CommandRegistry, MCPToolRegistry
from switchboard.runtime import Runtime

# Only what registration needs is imported here: every CLI command loads this plugin, and
# the MCP SDK (server, bridge, transports) is imported when a surface actually starts.
from . import stdio, tools_events, tools_todos, tools_webhooks
from .context import ToolContext

__all__ = ["ToolContext"]

CONFIG_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "dns_rebinding_protection": {"type": "boolean"},
        "allowed_hosts": {"type": "array", "items": {"type": "string"}},
        "allowed_origins": {"type": "array", "items": {"type": "string"}},
    },
}


@hookimpl
def switchboard_config_schema() -> dict[str, Any]:
    """``[plugins.mcp]``: DNS-rebinding protection and extra allowed hosts and origins."""
    return CONFIG_SCHEMA


#: The verbs that change a webhook: not a drain-only endpoint's unless vended with them.
MANAGING = frozenset(
    {
        "create_webhook",
        "rotate_webhook",
        "delete_webhook",
        "add_webhook_route",
        "remove_webhook_route",
    }
)


@hookimpl
def switchboard_check_config(config: dict[str, Any]) -> None:
    """``[plugins.mcp]`` checked when the config is loaded, not when ``/mcp`` is built in a
    worker: an ``allowed_hosts`` or ``allowed_origins`` entry that could never match stops
    every command that reads the config, named in the config file."""
    hostcheck.check_extras(config)


@hookimpl
def switchboard_register_mcp_tools(register: MCPToolRegistry) -> None:
    """The built-in verbs: webhooks, routes, events and the drain verbs (rules: that plugin)."""
    for module in (tools_webhooks, tools_events, tools_todos):
        for fn in module.TOOLS:
            register.add_tool(
                fn.__name__,
                fn,
                description=inspect.cleandoc(fn.__doc__ or ""),
                manages_webhooks=fn.__name__ in MANAGING,
                verb=tools_todos.VERBS.get(fn.__name__, ""),
            )


@hookimpl
def switchboard_register_commands(register: CommandRegistry) -> None:
    """``switchboard mcp --token TOKEN``: serve the tools over stdio."""
    register.add_command(
        "mcp",
        stdio.configure,
        stdio.run,
        help="serve the MCP tools over stdio as the endpoint holding --token",
    )


@hookimpl
def switchboard_register_routes(app: Any) -> None:
    """``POST /mcp`` (and ``DELETE``, refused: stateless): streamable HTTP, bridged into Sanic."""
    from . import route

    route.add_route(app)


@hookimpl
async def switchboard_startup(app: Runtime) -> None:
    """Build the MCP server from the tool registry and start its session manager."""
    from . import streamable

    await streamable.start(app)


@hookimpl
async def switchboard_shutdown(app: Runtime) -> None:
    """Stop the session manager (in-flight requests are cancelled)."""
    # Only a runtime that started it has one to stop: every CLI command shuts a runtime
    # down, and importing the SDK here cost each of them more than half its run.
    streamable = sys.modules.get(f"{__name__}.streamable")
    if streamable is not None:
        await streamable.stop(app)
