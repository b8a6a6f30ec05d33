"""First-party plugin: the ``rules`` routing stage (jq in a sandbox), its verbs and rule packs."""

from __future__ import annotations

import inspect
from typing import Any

from switchboard.plugin import (
    CommandRegistry,
    MCPToolRegistry,
    RulePackRegistry,
    Runtime,
    StageRegistry,
    hookimpl,
)

from . import commands, tools, tools_history, tools_policy
from .packs import PACKS
from .stage import CONFIG_SCHEMA, RulesStage


def stage_of(runtime: Runtime) -> RulesStage:
    """This runtime's rules stage (built at registration from ``[plugins.rules]``)."""
    stage = runtime.registries.stages.get("rules")
    assert isinstance(stage, RulesStage)
    return stage


@hookimpl
def switchboard_config_schema() -> dict[str, Any]:
    """``[plugins.rules]``: the sandbox's limits."""
    return CONFIG_SCHEMA


@hookimpl
def switchboard_register_routing_stages(register: StageRegistry, config: dict[str, Any]) -> None:
    """The ``rules`` stage, configured from this plugin's own section."""
    register.add(RulesStage(config))


@hookimpl
def switchboard_register_rule_packs(register: RulePackRegistry) -> None:
    """The shipped packs: ``cairn-handoff``, ``lanes`` and ``pool-review``."""
    for name, (config, description) in PACKS.items():
        register.add_pack(name, config, description=description)


@hookimpl
def switchboard_register_commands(register: CommandRegistry) -> None:
    """``switchboard rules check|test`` (a routing config offline) and ``switchboard packs``."""
    commands.register(register)


#: The verbs that change a webhook's routing or what its stored deliveries made (a rollback,
#: a re-route, a release): not a drain-only endpoint's unless vended with
#: them (the reads, dry runs and diffs stay every endpoint's).
MANAGING = frozenset(
    {
        "set_webhook_rules",
        "add_webhook_rule",
        "update_webhook_rule",
        "move_webhook_rule",
        "remove_webhook_rule",
        "install_rule_pack",
        "rollback_webhook_rules",
        "reroute_webhook_events",
        "release_held_events",
        "release_once_claim",
        "set_webhook_policy",
    }
)


@hookimpl
def switchboard_register_mcp_tools(register: MCPToolRegistry) -> None:
    """This plugin's verbs: list, set, add, update, move, remove and test a webhook's rules;
    list and install rule packs."""
    for fn in (*tools.TOOLS, *tools_history.TOOLS, *tools_policy.TOOLS):
        register.add_tool(
            fn.__name__,
            fn,
            description=inspect.cleandoc(fn.__doc__ or ""),
            manages_webhooks=fn.__name__ in MANAGING,
        )


@hookimpl
async def switchboard_startup(runtime: Runtime) -> None:
    """Warm the fork server so the first routed delivery does not pay for its start."""
    await stage_of(runtime).sandbox.start()


@hookimpl
async def switchboard_shutdown(runtime: Runtime) -> None:
    """Stop the fork server and every evaluator."""
    await stage_of(runtime).close()
