"""The essential built-in plugin: the host's own operator commands."""

from __future__ import annotations

from . import hookimpl
from .cli import admin, serve
from .registry import CommandRegistry


@hookimpl
def switchboard_register_commands(register: CommandRegistry) -> None:
    admin.register(register)
    register.add_command(
        "serve", serve.configure, serve.run, needs_store=False,
        help="run the service (receiver, MCP, health) on the configured address",
    )
