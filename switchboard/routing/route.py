"""Run the enabled routing stages in order; the first decision wins, else the default."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

from ..contract.routing import (
    REPLAY_RERUN,
    SAID_DECIDED,
    SAID_FAULTED,
    SAID_NOT_REACHED,
    SAID_PASSED,
    StageSaid,
    replay_of,
)
from .decide import default_decision, pending_decision
from .model import (
    Decision,
    Fault,
    Grant,
    RoutingConfig,
    RoutingContext,
    RoutingStage,
    StageResult,
    Target,
)
from .stagecall import budget_ms, call_stage, stage_defers

if TYPE_CHECKING:
    from ..runtime import Runtime


def grant_for(webhook: dict[str, Any]) -> Grant:
    """The grant of a resolved webhook row (see ``store.webhooks.resolve_webhook``)."""
    target_queue = webhook["target_queue"]
    queues = dict.fromkeys(
        [
            target_queue,
            *(webhook.get("owner_webhook_queues") or []),
            *(webhook.get("human_queues") or []),
        ]
    )
    targets = tuple(
        Target(t["id"], tuple(t.get("queues") or ())) for t in webhook.get("targets") or []
    )
    return Grant(target_queue=target_queue, queues=tuple(queues), targets=targets)


def config_of(webhook: dict[str, Any]) -> RoutingConfig:
    """The routing config stored on a webhook row (its ``routing`` column).

    Not copied: every row is parsed afresh from the database for one caller, and every
    caller that hands a config on does so through ``to_json()`` (a copy).
    """
    return RoutingConfig.from_json(webhook.get("routing"), copy=False)


#: One stage's turn in a replay: what it answers for the context (a :class:`StageResult`,
#: or the :class:`Fault` it earned), in place of calling it live.
Turn = Callable[[RoutingStage, RoutingContext], Awaitable[StageResult | Fault]]


async def route(
    stages: Sequence[RoutingStage],
    webhook: dict[str, Any],
    config: RoutingConfig,
    envelope: dict[str, Any],
    grant: Grant,
    *,
    runtime: Runtime | None = None,
    external_id: str | None = None,
    stage_timeout_ms: int | None = None,
    turn: Turn | None = None,
    said: list[StageSaid] | None = None,
    defer: bool = False,
    faults: Sequence[Fault] = (),
    skip: Collection[str] = (),
    would_defer: list[str] | None = None,
    deferred: bool = False,
    confirm: Callable[[], Awaitable[None]] | None = None,
) -> Decision:
    """The decision for one delivery: live (the saved config) or a dry run (any config).

    Each stage sees the faults of the stages before it in ``ctx.faults``; ``runtime`` is
    handed to the stages (``ctx.runtime``) by the receiver and the dry runs over a webhook,
    ``external_id`` (the dedup key) by the receiver only. Each stage runs under
    ``stage_timeout_ms`` (``[routing] stage_timeout_ms``; :mod:`.stagecall`).

    History replays walk the same loop: ``turn`` answers for each stage instead (re-run,
    or read from the stored trace: :mod:`.stagereplay`), and ``said`` is given what each
    stage said, in order (the stages after the deciding one: not reached).

    ``defer`` (the receiver): a deferred stage that has work for the delivery is not run
    but left pending (:func:`.decide.pending_decision`). ``faults`` are those of stages
    that ran earlier (the triage worker resumes at the deferred stage, ``deferred``: a
    deferred stage's :class:`NotYet` then propagates).

    A dry run passes ``would_defer``: the first deferred stage that would leave a live
    delivery pending is appended to it (and then runs inline, unless it is in ``skip``:
    the stages named there are asked only that).

    ``confirm`` (the receiver, routing on a worker's kept resolution): awaited once before
    the first stage that must not be asked twice (replay ``stored``, as the llm stage) is
    asked live; it raises when the resolution went stale, and the delivery is routed
    afresh. A ``rerun`` stage is deterministic: asking it again costs nothing but time.
    """
    ctx = RoutingContext(
        webhook=webhook,
        envelope=envelope,
        grant=grant,
        config=config,
        runtime=runtime,
        external_id=external_id,
        faults=list(faults),
        deferred=deferred,
    )
    for i, stage in enumerate(stages):
        if turn is not None:
            answer = await turn(stage, ctx)
        else:
            is_deferred = getattr(stage, "deferred", False) is True
            if defer and is_deferred:
                if await stage_defers(stage, ctx, budget_ms(stage, stage_timeout_ms)):
                    return pending_decision(stage.name, ctx.faults)
                continue
            if (
                would_defer is not None
                and not would_defer
                and is_deferred
                and await stage_defers(stage, ctx, budget_ms(stage, stage_timeout_ms))
            ):
                would_defer.append(stage.name)
            if stage.name in skip:
                continue
            if confirm is not None and replay_of(stage) != REPLAY_RERUN:
                await confirm()
                confirm = None
            answer = await call_stage(stage, ctx, budget_ms(stage, stage_timeout_ms))
        if isinstance(answer, Fault):
            if said is not None:
                said.append(StageSaid(stage.name, SAID_FAULTED, replay_of(stage), fault=answer))
                _not_reached(said, stages[i + 1 :])
            # A misbehaving stage decides nothing: the default, saying which stage and why.
            return default_decision(
                grant, config.default_action, (*ctx.faults, answer), cause=answer.cause
            )
        if answer.decision is not None:
            if said is not None:
                said.append(StageSaid(stage.name, SAID_DECIDED, replay_of(stage), answer.decision))
                _not_reached(said, stages[i + 1 :])
            return answer.decision
        ctx.faults.extend(answer.faults)
        if said is not None:
            said.append(
                StageSaid(stage.name, SAID_PASSED, replay_of(stage), faults=tuple(answer.faults))
            )
    return default_decision(grant, config.default_action, ctx.faults)


def _not_reached(said: list[StageSaid], rest: Sequence[RoutingStage]) -> None:
    said.extend(StageSaid(s.name, SAID_NOT_REACHED, replay_of(s)) for s in rest)
