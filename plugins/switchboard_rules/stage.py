"""The ``rules`` routing stage: evaluate in the sandbox, decide in the server."""

from __future__ import annotations

from typing import Any

from switchboard.plugin import (
    MatchResult,
    RoutingConfig,
    RoutingContext,
    StageResult,
    decide,
    rule_error,
)

from .jqscan import forbidden_names
from .sandbox import Limits, Sandbox

#: ``[plugins.rules]``: the operator's limits. The only place their defaults are written.
CONFIG_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "max_concurrency": {"type": "integer", "minimum": 1, "maximum": 64, "default": 2},
        "slot_wait_ms": {"type": "integer", "minimum": 0, "maximum": 60000, "default": 1000},
        "memory_mib": {"type": "integer", "minimum": 32, "maximum": 4096, "default": 128},
        "rule_ms": {"type": "integer", "minimum": 1, "maximum": 10000, "default": 50},
        "event_ms": {"type": "integer", "minimum": 1, "maximum": 60000, "default": 250},
        "kill_grace_ms": {"type": "integer", "minimum": 100, "maximum": 60000, "default": 1750},
        "cache_size": {"type": "integer", "minimum": 1, "maximum": 4096, "default": 64},
        "compile_ms": {"type": "integer", "minimum": 10, "maximum": 60000, "default": 1000},
    },
}

DEFAULTS: dict[str, Any] = {k: v["default"] for k, v in CONFIG_SCHEMA["properties"].items()}


class RulesStage:
    """First match wins over the webhook's saved rules; no rules never touches a process."""

    name = "rules"

    def __init__(self, settings: dict[str, Any] | None = None) -> None:
        self.settings: dict[str, Any] = {**DEFAULTS, **(settings or {})}
        self._sandbox: Sandbox | None = None

    @property
    def sandbox(self) -> Sandbox:
        """The sandbox (created on first use; its fork server starts on first request)."""
        if self._sandbox is None:
            self._sandbox = Sandbox(Limits.from_config(self.settings))
        return self._sandbox

    async def close(self) -> None:
        if self._sandbox is not None:
            await self._sandbox.close()
            self._sandbox = None

    async def validate(self, config: RoutingConfig) -> None:
        """Refuse forbidden builtins, then compile every expression in the sandbox."""
        for index, rule in enumerate(config.rules):
            bad = forbidden_names(rule["expr"])
            if bad:
                raise rule_error(index, rule, "forbidden_function",
                                 f"expression uses forbidden {', '.join(bad)}")
        if not config.rules:
            return
        errors = await self.sandbox.compile([r["expr"] for r in config.rules], config.params)
        if errors:
            index, message = min(errors)
            raise rule_error(index, config.rules[index], "invalid_expression",
                             f"expression does not compile: {message}")

    async def route(self, ctx: RoutingContext) -> StageResult:
        rules = ctx.config.rules
        if not rules:
            return StageResult()
        match: MatchResult = await self.sandbox.evaluate(
            [(r.get("id"), r["expr"]) for r in rules], dict(ctx.config.params), ctx.envelope
        )
        if match.rule_index is None:
            # No match: later stages (LLM triage) or the default decide; faults carry on.
            return StageResult(None, match.faults)
        return StageResult(decide(ctx.config, match, ctx.grant))
