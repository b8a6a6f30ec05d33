"""The plugin manager: built-ins and entry-point plugins, blocking, and registry building."""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Collection
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

import pluggy

from . import hookspecs
from .config import Config, did_you_mean
from .configcheck import Origin, plugin_message
from .errors import ConfigError, PluginError
from .plugin_load import load_entry_points, plugin_paragraph
from .registry import Registries
from .routing.stagecheck import stage_problem

log = logging.getLogger("switchboard.plugins")

ENTRY_POINT_GROUP = "switchboard"

#: Host features that are plugins but cannot be disabled (the operator CLI and store).
ESSENTIAL_PLUGINS: tuple[str, ...] = ("switchboard.builtin",)

#: Registration hooks and the ``Registries`` attribute each one fills.
REGISTRATION_HOOKS: dict[str, str] = {
    "switchboard_register_sources": "sources",
    "switchboard_register_projections": "projections",
    "switchboard_register_subjects": "subjects",
    "switchboard_register_routing_stages": "stages",
    "switchboard_register_rule_packs": "rule_packs",
    "switchboard_register_llm_providers": "llm_providers",
    "switchboard_register_sinks": "sinks",
    "switchboard_register_mcp_tools": "mcp_tools",
    "switchboard_register_commands": "commands",
    "switchboard_migrations": "migrations",
}


@dataclass(frozen=True)
class PluginInfo:
    name: str
    version: str | None
    distribution: str | None
    hooks: tuple[str, ...]


def make_plugin_manager(
    disabled: list[str] | tuple[str, ...] = (), origin: Origin | None = None
) -> pluggy.PluginManager:
    """Load the essential plugins and every installed ``switchboard`` entry point, but
    the ``disabled`` ones (a mistake in them told as from ``origin``: the config's)."""
    pm = pluggy.PluginManager("switchboard")
    pm.add_hookspecs(hookspecs)
    where = (origin or Origin()).where(("disabled_plugins",))
    for name in disabled:
        if name in ESSENTIAL_PLUGINS:
            raise ConfigError(f"{where}: {name!r} is essential")
        pm.set_blocked(name)
    for modname in ESSENTIAL_PLUGINS:
        pm.register(importlib.import_module(modname), name=modname)
    # A blocked name is listed by pluggy whether or not it exists, so ask the metadata: a
    # typo here would leave the plugin it meant running, so it is refused, not warned of.
    installed = installed_plugin_names()
    for name in disabled:
        if name not in installed:
            raise ConfigError(
                f"{where}: no installed plugin is called {name!r}"
                f"{did_you_mean(name, installed)}; installed: {', '.join(sorted(installed))}"
            )
    load_entry_points(pm, ENTRY_POINT_GROUP)
    return pm


def installed_plugin_names(pm: pluggy.PluginManager | None = None) -> set[str]:
    """Every installed plugin's name: the entry points (disabled ones too), the essential
    ones, and (given ``pm``) any registered by hand."""
    names = {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)} | set(ESSENTIAL_PLUGINS)
    if pm is not None:
        names |= {name for name, _ in pm.list_name_plugin()}
    return names


def call_each(pm: pluggy.PluginManager, hook_name: str, **kwargs: Any) -> list[tuple[str, Any]]:
    """Call every implementation of ``hook_name``, tagging results with the plugin's name."""
    results = []
    for impl in reversed(getattr(pm.hook, hook_name).get_hookimpls()):
        args = {k: v for k, v in kwargs.items() if k in impl.argnames}
        results.append((impl.plugin_name, impl.function(**args)))
    return results


def build_registries(pm: pluggy.PluginManager, config: Config | None = None) -> Registries:
    """Call every registration hook once, so registries know which plugin added what.

    Each implementation that asks for ``config`` gets its own plugin's
    ``[plugins.<name>]`` section (schema defaults filled in), never another's; a
    ``ConfigError`` it raises is told where that section came from (the config file).
    """
    if config is None:
        # No config file: every plugin still gets its schema's defaults, as under an
        # empty config, so a plugin never has to guess them a second time.
        config = Config(raw={"plugins": {}}, plugin_schemas=plugin_config_schemas(pm))
    regs = Registries()
    for hook_name, attr in REGISTRATION_HOOKS.items():
        registry = getattr(regs, attr)
        for impl in reversed(getattr(pm.hook, hook_name).get_hookimpls()):
            registry.current_plugin = impl.plugin_name
            kwargs: dict[str, Any] = {"register": registry}
            if "config" not in impl.argnames:
                impl.function(**kwargs)
                continue
            kwargs["config"] = section = config.plugin(impl.plugin_name)
            try:
                impl.function(**kwargs)
            except ConfigError as exc:
                raise _located(config, impl.plugin_name, section, exc) from exc
        registry.current_plugin = "?"
    for stage in regs.stages:
        name = str(stage.name)
        problem = stage_problem(stage, name)
        if problem is not None:
            # Refused at start, not as a stage_error on every delivery it would route.
            owner = regs.stages.owner(name)
            raise PluginError(
                plugin_paragraph(ENTRY_POINT_GROUP, owner, f"routing stage {name!r}: {problem}")
            )
    return regs


def plugin_config_schemas(pm: pluggy.PluginManager) -> dict[str, dict[str, Any]]:
    return {name: schema for name, schema in call_each(pm, "switchboard_config_schema") if schema}


def disabled_config_schemas(names: Collection[str]) -> dict[str, dict[str, Any] | None]:
    """The config schemas of the disabled plugins ``names`` (None: declares none), read
    from each one's entry point without registering it; one that cannot be imported is
    left out (its section is then not checked: it is not running)."""
    out: dict[str, dict[str, Any] | None] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name not in names:
            continue
        try:
            hook = getattr(ep.load(), "switchboard_config_schema", None)
            out[ep.name] = hook() if callable(hook) else None
        except Exception:  # a plugin may be disabled because it is broken
            log.debug("could not read the config schema of disabled plugin %s", ep.name)
    return out


def apply_config(pm: pluggy.PluginManager, config: Config) -> None:
    """Validate every ``[plugins.<name>]`` section: it names an installed plugin, and
    matches that plugin's schema (a plugin without one takes no settings); a disabled
    plugin's section too, against the schema it would have. Then each plugin checks what
    its section means (``switchboard_check_config``)."""
    sections = set(config.raw["plugins"])
    config.validate_plugins(
        plugin_config_schemas(pm),
        installed_plugin_names(pm),
        disabled_config_schemas(sections & set(config.disabled_plugins)),
    )
    for impl in reversed(pm.hook.switchboard_check_config.get_hookimpls()):
        section = config.plugin(impl.plugin_name)
        try:
            impl.function(**({"config": section} if "config" in impl.argnames else {}))
        except ConfigError as exc:
            raise _located(config, impl.plugin_name, section, exc) from exc


def _located(config: Config, plugin: str, section: dict[str, Any], exc: ConfigError) -> ConfigError:
    """A plugin's ``ConfigError`` about its section, told where the section came from (the
    plugin knows only the section, not the file it was written in)."""
    schema = config.plugin_schemas.get(plugin) or {}
    keys = {*section, *(schema.get("properties") or {})}
    return ConfigError(plugin_message(plugin, str(exc), keys, config.origin))


def list_plugins(pm: pluggy.PluginManager) -> list[PluginInfo]:
    """What is loaded: name, version, distribution and the hooks each implements."""
    dists = {id(plugin): dist for plugin, dist in pm.list_plugin_distinfo()}
    out = []
    for name, plugin in pm.list_name_plugin():
        if plugin is None:
            continue
        dist = dists.get(id(plugin))
        hooks = tuple(sorted(h.name for h in pm.get_hookcallers(plugin) or ()))
        version = dist.version if dist else getattr(plugin, "__version__", None)
        if dist is None and inspect.ismodule(plugin) and plugin.__name__.startswith("switchboard"):
            from . import __version__

            version = version or __version__
        out.append(
            PluginInfo(
                name=name,
                version=version,
                distribution=dist.project_name if dist else None,
                hooks=hooks,
            )
        )
    return sorted(out, key=lambda p: p.name)
