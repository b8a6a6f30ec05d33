"""The one dry run: validate a routing config as a save would, then route one envelope through it."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

from .config import validate_config
from .model import Grant, RoutingStage
from .route import route
from .stagecall import stage_timeout_ms as configured_timeout_ms
from .trace import validate_trace

if TYPE_CHECKING:
    from ..runtime import Runtime


async def dry_run(
    stages: Sequence[RoutingStage],
    config: Any,
    envelope: dict[str, Any],
    grant: Grant,
    webhook: dict[str, Any] | None = None,
    *,
    runtime: Runtime | None = None,
    skip: Collection[str] = (),
    stage_timeout_ms: int | None = None,
) -> dict[str, Any]:
    """``{"config", "decision", "trace", "envelope"}`` for ``envelope`` under ``config``; saves nothing.

    ``config`` is validated exactly as a save validates it (structure, grant, then each
    enabled stage's own checks), so a refused config raises
    :class:`switchboard.errors.RuleValidationError` here too. The MCP tool, the
    ``rules test`` command and history replays all call this. ``runtime`` reaches the
    stages as ``ctx.runtime``; the stages named in ``skip`` are validated but not run
    (``test_webhook_rules`` skips ``llm`` unless asked, so a dry run spends no budget).
    Each stage's budget is ``stage_timeout_ms`` when given (an offline run that loaded a
    config: ``switchboard rules test``), else ``runtime``'s ``[routing] stage_timeout_ms``.
    ``pending`` names the deferred stage a live delivery would wait for (stored
    ``pending``, answered 202 at once), when one would: the decision is then what that
    stage decided (run) or what the stages without it decide (skipped).
    """
    normalized = await validate_config(config, grant, stages, webhook)
    pending: list[str] = []
    decision = await route(
        stages,
        webhook or {},
        normalized,
        envelope,
        grant,
        runtime=runtime,
        stage_timeout_ms=_budget(stage_timeout_ms, runtime),
        skip=skip,
        would_defer=pending,
    )
    # Validated as live ingest validates what it stores: a trace it would refuse is refused here too.
    validate_trace(decision.trace)
    result: dict[str, Any] = {
        "config": normalized.to_json(),
        "decision": decision.to_json(),
        "trace": decision.trace,
        "envelope": envelope,
    }
    if pending:
        # Live, the producer would get 202 "pending" and this stage decide after it.
        result["pending"] = pending[0]
    return result


def _budget(given: int | None, runtime: Runtime | None) -> int | None:
    if given is not None:
        return given
    return None if runtime is None else configured_timeout_ms(runtime)
