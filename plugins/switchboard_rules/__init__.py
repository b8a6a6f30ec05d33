"""First-party plugin: the ``rules`` routing stage and the offline ``rules`` commands."""

from __future__ import annotations

from typing import Any

from switchboard import hookimpl

from . import commands
from .stage import CONFIG_SCHEMA, RulesStage


def stage_of(runtime: Any) -> RulesStage:
    """This runtime's rules stage, configured from ``[plugins.rules]``."""
    stage = runtime.registries.stages.get("rules")
    assert isinstance(stage, RulesStage)
    stage.configure(runtime.config.plugin("rules"))
    return stage


@hookimpl
def switchboard_config_schema() -> dict[str, Any]:
    return CONFIG_SCHEMA


@hookimpl
def switchboard_register_routing_stages(register: Any) -> None:
    register.add(RulesStage())


@hookimpl
def switchboard_register_commands(register: Any) -> None:
    commands.register(register)


@hookimpl
async def switchboard_startup(app: Any) -> None:
    # Warm the fork server so the first routed delivery does not pay for its start.
    await stage_of(app).sandbox.start()


@hookimpl
async def switchboard_shutdown(app: Any) -> None:
    await stage_of(app).close()
