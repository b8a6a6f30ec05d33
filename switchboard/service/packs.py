"""Rule packs: list what plugins contributed, install one on a webhook (validated like a save)."""

from __future__ import annotations

from typing import Any

from ..errors import NotFound
from ..routing.model import json_copy
from ..runtime import Runtime
from ..store import Row
from . import rules
from .common import clip


def _view(rt: Runtime, name: str) -> dict[str, Any]:
    pack = rt.registries.rule_packs.get(name)
    assert pack is not None
    return {
        "name": pack.name,
        "description": pack.description,
        "plugin": rt.registries.rule_packs.owner(name),
        "config": json_copy(pack.config),
    }


def list_packs(rt: Runtime) -> dict[str, Any]:
    """Every installed pack: its name, description, plugin and config (rules, default, params)."""
    return {"packs": [_view(rt, name) for name in rt.registries.rule_packs.names()]}


async def install_pack(
    rt: Runtime, caller: Row | None, webhook_id: str, pack: str, params: Any = rules.KEEP
) -> dict[str, Any]:
    """Replace the webhook's rules and default action with ``pack``'s, as ``set_rules`` would.

    ``params`` omitted keeps the webhook's stored params (so a re-install keeps its
    allowlists), None clears them; a pack's own ``params``, if it carries any, apply only
    when the webhook has none. Validated exactly like a save: a queue no target drains for
    an ``exclusive`` action fails the install with ``not_granted``.
    """
    found = rt.registries.rule_packs.get(pack)
    if found is None:
        raise NotFound(
            f"rule pack {clip(repr(pack))} not found (installed: "
            f"{', '.join(rt.registries.rule_packs.names()) or 'none'})",
            code="pack_not_found",
        )
    config = json_copy(found.config)
    if params is rules.KEEP and config.get("params"):
        current = await rules.list_rules(rt, caller, webhook_id)
        if not current.get("params"):
            params = config["params"]
    saved = await rules.set_rules(
        rt, caller, webhook_id, config.get("rules") or [], config.get("default_action"), params
    )
    return {"pack": pack, **saved}
