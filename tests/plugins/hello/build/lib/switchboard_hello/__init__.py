"""A third-party plugin: a CLI command, a config section, a migration and a sink."""

import json
from pathlib import Path

from switchboard import hookimpl

MIGRATIONS = Path(__file__).with_name("migrations")


@hookimpl
def switchboard_config_schema():
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": {"greeting": {"type": "string", "maxLength": 40}},
    }


async def _hello(args, rt):
    greeting = rt.config.plugin("hello").get("greeting", "hello")
    print(json.dumps({"greeting": greeting, "sources": rt.registries.sources.names()}))
    return 0


@hookimpl
def switchboard_register_commands(register):
    register.add_command("hello", lambda p: None, _hello, help="say hello", needs_store=False)


@hookimpl
def switchboard_migrations(register):
    register.add_directory("hello", MIGRATIONS)
