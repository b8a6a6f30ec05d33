"""The essential built-in plugin: the host's own operator commands."""

from __future__ import annotations

from . import hookimpl
from .cli import admin, read, send, serve, webhook
from .registry import CommandRegistry


@hookimpl
def switchboard_register_commands(register: CommandRegistry) -> None:
    admin.register(register)
    register.add_command(
        "serve",
        serve.configure,
        serve.run,
        needs_store=False,
        help="run the service (receiver, MCP, health) on the configured address",
    )
    register.add_command(
        "webhook",
        webhook.configure,
        webhook.run,
        help="create, list, rotate and delete webhooks; add and remove routes",
    )
    register.add_command(
        "events",
        read.configure_events,
        read.run_events,
        help="list a webhook's deliveries; show one with its trace and todos",
    )
    register.add_command(
        "todos",
        read.configure_todos,
        read.run_todos,
        help="list todos of every endpoint, by endpoint, queue and state; retry a dead one",
    )
    register.add_command(
        "send",
        send.configure,
        send.run,
        needs_store=False,
        help="sign and POST a file exactly as a producer would",
    )
