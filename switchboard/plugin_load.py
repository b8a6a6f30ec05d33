"""Loading the installed plugins, and a broken one told as one paragraph an operator can act on."""

from __future__ import annotations

import difflib
import inspect
from importlib.metadata import Distribution, EntryPoint, distributions
from typing import Any

import pluggy

from .errors import PluginError


def load_entry_points(pm: pluggy.PluginManager, group: str) -> None:
    """Load every entry point of ``group`` (blocked ones aside); a plugin that cannot be
    imported or whose hooks do not fit the specs raises :class:`PluginError` naming it."""
    try:
        pm.load_setuptools_entrypoints(group)
        pm.check_pending()
    except Exception as exc:
        # The fast path failed: find which plugin, and say why in the operator's terms.
        raise PluginError(_diagnose(pm, group, exc)) from None


def _entry_points(group: str) -> list[tuple[Distribution, EntryPoint]]:
    return [(d, ep) for d in distributions() for ep in d.entry_points if ep.group == group]


def _diagnose(pm: pluggy.PluginManager, group: str, exc: Exception) -> str:
    culprit = getattr(exc, "plugin", None)  # pluggy's PluginValidationError names its plugin
    for dist, ep in _entry_points(group):
        if pm.is_blocked(ep.name):
            continue
        if culprit is None:
            if pm.get_plugin(ep.name) is not None:
                continue
            try:
                plugin = ep.load()
            except Exception as err:
                return _paragraph(dist, ep, f"import failed: {type(err).__name__}: {err}")
            if plugin is None:
                continue
            culprit_why = _hook_problem(pm, plugin)
            if culprit_why:
                return _paragraph(dist, ep, culprit_why)
        elif pm.get_plugin(ep.name) is culprit or _loads_as(ep, culprit):
            return _paragraph(dist, ep, _hook_problem(pm, culprit) or _one_line(exc))
    return f"a plugin failed to load: {_one_line(exc)}"


def _loads_as(ep: EntryPoint, plugin: Any) -> bool:
    return inspect.ismodule(plugin) and ep.value.split(":", 1)[0] == plugin.__name__


def _hook_problem(pm: pluggy.PluginManager, plugin: Any) -> str | None:
    """What is wrong with ``plugin``'s hooks against the specs, or None."""
    # A registered plugin's unknown hook has a caller too, but no spec.
    specs = {
        name
        for name in dir(pm.hook)
        if name.startswith("switchboard_") and getattr(pm.hook, name).spec is not None
    }
    for name in sorted(dir(plugin)):
        if not name.startswith("switchboard_"):
            continue
        function = getattr(plugin, name)
        if not callable(function) or pm.parse_hookimpl_opts(plugin, name) is None:
            continue
        if name not in specs:
            close = difflib.get_close_matches(name, sorted(specs), n=1)
            hint = f" (did you mean `{close[0]}`?)" if close else ""
            return f"`{name}` is not a Switchboard hook{hint}"
        offered = tuple(getattr(pm.hook, name).spec.argnames)
        try:
            taken = [
                p.name
                for p in inspect.signature(function).parameters.values()
                if p.default is inspect.Parameter.empty
                and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
            ]
        except (TypeError, ValueError):
            continue
        extra = [a for a in taken if a not in offered]
        if extra:
            return (
                f"`{name}` got an unexpected argument `{extra[0]}` (the hook offers: "
                f"{', '.join(offered)})"
            )
    return None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def plugin_paragraph(group: str, plugin: str, why: str) -> str:
    """The paragraph for ``plugin`` (a registered plugin's name) that ``why`` stops: its
    distribution and entry point when it came from one, and how to start without it."""
    for dist, ep in _entry_points(group):
        if ep.name == plugin:
            return _paragraph(dist, ep, why)
    return (
        f"plugin {plugin!r} cannot be loaded: {why}. To start without it, add it to "
        f'disabled_plugins in the config (disabled_plugins = ["{plugin}"])'
    )


def _paragraph(dist: Distribution, ep: EntryPoint, why: str) -> str:
    name = dist.metadata["Name"] or "?"
    return (
        f"plugin {ep.name!r} cannot be loaded (distribution {name} {dist.version}, entry "
        f"point {ep.name} = {ep.value}): {why}. To start without it, add it to "
        f'disabled_plugins in the config (disabled_plugins = ["{ep.name}"])'
    )
