"""Read, set and clear an endpoint's ``llm_triage`` (the MCP tools and the CLI call these)."""

from __future__ import annotations

from typing import Any

from switchboard.plugin import NotFound, Runtime

from . import store
from .settings import TRIAGE_SCHEMA, check_triage
from .stage import DEFAULTS, LLMStage


def stage_settings(rt: Runtime) -> dict[str, Any]:
    """The operator's ``[plugins.llm]`` as the registered stage holds it."""
    stage = rt.registries.stages.get("llm")
    return stage.settings if isinstance(stage, LLMStage) else dict(DEFAULTS)


async def _granted(rt: Runtime, endpoint_id: str) -> list[str]:
    granted = await rt.store.endpoint_grant_queues(endpoint_id)
    if granted is None:
        raise NotFound(f"endpoint {endpoint_id} not found")
    return granted


def _in_schema_order(config: dict[str, Any] | None) -> dict[str, Any] | None:
    """The stored document (jsonb orders keys its own way) in the schema's order."""
    if config is None:
        return None
    keys = [*TRIAGE_SCHEMA["properties"], *sorted(set(config) - set(TRIAGE_SCHEMA["properties"]))]
    return {k: config[k] for k in keys if k in config}


async def _view(rt: Runtime, endpoint_id: str, granted: list[str]) -> dict[str, Any]:
    used = await store.usage(rt, endpoint_id)
    tokens = await store.token_usage(rt, endpoint_id)
    return {
        "endpoint_id": endpoint_id,
        "llm_triage": _in_schema_order(await store.load(rt, endpoint_id)),
        # Whether routing.stages runs the llm stage at all (an operator's switch).
        "enabled": any(s.name == "llm" for s in rt.stages),
        "providers": rt.registries.llm_providers.names(),
        "granted_queues": granted,
        "usage": {"minute": used[store.MINUTE], "day": used[store.DAY]},
        "tokens": {"minute": tokens[store.MINUTE], "day": tokens[store.DAY]},
        # Deferred mode: this endpoint's deliveries waiting for the model (the queue depth).
        "mode": stage_settings(rt)["mode"],
        "pending": (await rt.store.pending_counts(endpoint_id)).get("llm", 0),
    }


async def get_triage(rt: Runtime, endpoint_id: str) -> dict[str, Any]:
    """The endpoint's settings (null when it has not opted in), what it may choose from,
    the prompts and tokens spent in the current minute and day, and how many of its
    deliveries wait for the model."""
    return await _view(rt, endpoint_id, await _granted(rt, endpoint_id))


async def set_triage(rt: Runtime, endpoint_id: str, doc: Any) -> dict[str, Any]:
    """Validate and save ``doc`` (defaults filled in); None clears (opts out)."""
    granted = await _granted(rt, endpoint_id)
    if doc is None:
        await store.clear(rt, endpoint_id)
    else:
        config = check_triage(doc, stage_settings(rt), granted, rt.registries.llm_providers.names())
        await store.save(rt, endpoint_id, config)
    return await _view(rt, endpoint_id, granted)
