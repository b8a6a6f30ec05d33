"""The one dry run: validate a routing config as a save would, then route one envelope through it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .config import validate_config
from .model import Grant, RoutingStage
from .route import route


async def dry_run(
    stages: Sequence[RoutingStage],
    config: Any,
    envelope: dict[str, Any],
    grant: Grant,
    webhook: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``{"config", "decision", "trace", "envelope"}`` for ``envelope`` under ``config``; saves nothing.

    ``config`` is validated exactly as a save validates it (structure, grant, then each
    enabled stage's own checks), so a refused config raises
    :class:`switchboard.errors.RuleValidationError` here too. The MCP tool, the
    ``rules test`` command and history replays all call this.
    """
    normalized = await validate_config(config, grant, stages)
    decision = await route(stages, webhook or {}, normalized, envelope, grant)
    return {
        "config": normalized.to_json(),
        "decision": decision.to_json(),
        "trace": decision.trace,
        "envelope": envelope,
    }
