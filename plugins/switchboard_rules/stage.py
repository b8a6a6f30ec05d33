"""The ``rules`` routing stage: evaluate in the sandbox, decide in the server."""

from __future__ import annotations

from typing import Any

from switchboard.routing.decide import decide
from switchboard.routing.model import RoutingContext, StageResult
from switchboard.routing.sandbox import Sandbox

#: ``[plugins.rules]`` keys and their defaults (the operator's limits).
DEFAULTS: dict[str, Any] = {
    "max_concurrency": 2,
    "slot_wait_ms": 1000,
    "memory_mib": 128,
    "rule_ms": 50,
    "event_ms": 250,
    "kill_grace_ms": 1750,
    "cache_size": 64,
    "compile_ms": 1000,
}

CONFIG_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "max_concurrency": {"type": "integer", "minimum": 1, "maximum": 64},
        "slot_wait_ms": {"type": "integer", "minimum": 0, "maximum": 60000},
        "memory_mib": {"type": "integer", "minimum": 32, "maximum": 4096},
        "rule_ms": {"type": "integer", "minimum": 1, "maximum": 10000},
        "event_ms": {"type": "integer", "minimum": 1, "maximum": 60000},
        "kill_grace_ms": {"type": "integer", "minimum": 100, "maximum": 60000},
        "cache_size": {"type": "integer", "minimum": 1, "maximum": 4096},
        "compile_ms": {"type": "integer", "minimum": 10, "maximum": 60000},
    },
}


class RulesStage:
    """First match wins over the webhook's saved rules; no rules never touches a process."""

    name = "rules"

    def __init__(self) -> None:
        self.settings: dict[str, Any] = dict(DEFAULTS)
        self._sandbox: Sandbox | None = None

    def configure(self, section: dict[str, Any]) -> None:
        self.settings = {**DEFAULTS, **section}

    @property
    def sandbox(self) -> Sandbox:
        """The sandbox (created on first use; its fork server starts on first request)."""
        if self._sandbox is None:
            s = self.settings
            self._sandbox = Sandbox(
                max_concurrency=s["max_concurrency"],
                slot_wait_s=s["slot_wait_ms"] / 1000,
                memory_bytes=s["memory_mib"] * 2**20,
                rule_ms=s["rule_ms"],
                event_ms=s["event_ms"],
                kill_grace_ms=s["kill_grace_ms"],
                cache_size=s["cache_size"],
                compile_ms=s["compile_ms"],
            )
        return self._sandbox

    async def close(self) -> None:
        if self._sandbox is not None:
            await self._sandbox.close()
            self._sandbox = None

    async def route(self, ctx: RoutingContext) -> StageResult:
        rules = list(ctx.webhook.get("routing_rules") or [])
        if not rules:
            return StageResult()
        params = dict(ctx.webhook.get("routing_params") or {})
        match = await self.sandbox.evaluate(
            [(r.get("id"), r["expr"]) for r in rules], params, ctx.envelope
        )
        if match.rule_index is None:
            # No match: later stages (LLM triage) or the default decide; faults carry on.
            return StageResult(None, match.faults)
        config = {"rules": rules, "default_action": ctx.webhook.get("default_action")}
        return StageResult(decide(config, match, ctx.grant))
