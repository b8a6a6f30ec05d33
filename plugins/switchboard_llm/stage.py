"""The ``llm`` routing stage: one bounded, audited model call when no rule matched.

It runs after the rules (``routing.stages``), only for a webhook whose owner endpoint
opted in, and it can only choose among the queues the owner described that the delivery's
grant still reaches. Anything else — an unknown queue, low confidence, an answer that is
not exactly ``{queue, confidence, reason}``, a transport error, a timeout, a spent
budget — takes the deterministic default, with the cause and the model's answer (if any)
in the trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
from typing import Any

from switchboard.plugin import (
    CAUSE_LLM_BUDGET_EXHAUSTED,
    CAUSE_LLM_ERROR,
    CAUSE_LLM_INVALID_ANSWER,
    CAUSE_LLM_LOW_CONFIDENCE,
    CAUSE_LLM_TIMEOUT,
    CAUSE_LLM_UNKNOWN_QUEUE,
    LLM_TOKENS,
    REPLAY_STORED,
    STAGE_LLM,
    Completion,
    Decision,
    NotYet,
    RoutingContext,
    StageResult,
    default_decision,
)

from . import store
from .prompt import SYSTEM, build_prompt, event_view
from .settings import ANSWER, CONFIG_SCHEMA, DEFAULT_PROVIDER_IN_FLIGHT, answer_schema
from .slots import Slots

log = logging.getLogger("switchboard.llm")

DEFAULTS: dict[str, Any] = {
    k: v["default"] for k, v in CONFIG_SCHEMA["properties"].items() if "default" in v
}

#: The most of any text from the model (or about a call) kept in a trace: a trace is stored
#: on the event and on each of its todos, so the model's output must never size it.
_ANSWER_MAX = 1000
#: How soon an event that found its provider's calls all taken is claimed again.
_BUSY_RETRY_S = 0.5
_DETAIL_MAX = 300
#: How often an inline call looks again at tokens that calls in flight hold.
_HELD_POLL_S = 0.1
#: How long at most an inline call waits for them (the producer is waiting too).
_HELD_WAIT_MAX_S = 2.0


class InvalidAnswer(ValueError):
    """The model's text is not exactly one valid answer object."""


def _no_constants(name: str) -> Any:
    raise InvalidAnswer(f"{name} is not a JSON number")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise InvalidAnswer(f"key {key!r} appears twice")
        out[key] = value
    return out


def parse_answer(text: str) -> dict[str, Any]:
    """``{queue, confidence, reason}`` from the model's text, validated strictly.

    The text must be one JSON object (surrounding whitespace aside): no code fences, no
    prose, no duplicate keys, no NaN; exactly the three keys with their types, confidence
    within 0..1. Raises :class:`InvalidAnswer` saying what is wrong.
    """
    try:
        doc = json.loads(text, parse_constant=_no_constants, object_pairs_hook=_no_duplicates)
    except InvalidAnswer:
        raise
    except (ValueError, RecursionError) as exc:
        raise InvalidAnswer(f"not JSON: {exc}") from None
    error = next(iter(sorted(ANSWER.iter_errors(doc), key=lambda e: e.message)), None)
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path)
        raise InvalidAnswer(f"{where + ': ' if where else ''}{error.message}")
    if not math.isfinite(doc["confidence"]):
        raise InvalidAnswer("confidence: not a finite number")
    return dict(doc)


class LLMStage:
    """The ``llm`` stage, limited by the operator's ``[plugins.llm]`` ceilings."""

    name = "llm"
    #: history never asks the model again (it costs money and is not reproducible): its
    #: verdict on a stored delivery is read from that delivery's trace
    replay = REPLAY_STORED

    def __init__(self, settings: dict[str, Any] | None = None) -> None:
        self.settings: dict[str, Any] = {**DEFAULTS, **(settings or {})}
        # The host's stage budget must outlast the longest model call an owner may set,
        # plus the stage's own reads and its budget's spend (seconds, not minutes).
        self.timeout_ms = int(self.settings["max_timeout_ms"]) + 5000
        # Deferred (the default): the producer never waits for a model (the host's triage
        # worker runs the stage after the 202), at most max_in_flight calls per process.
        self.deferred = self.settings["mode"] == "deferred"
        self.max_in_flight = int(self.settings["max_in_flight"])
        self.max_attempts = int(self.settings["max_attempts"])
        self._slots = Slots()

    async def _work(
        self, ctx: RoutingContext
    ) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
        """The endpoint's triage and the queues to offer, or None: nothing to ask."""
        rt = ctx.runtime
        endpoint_id = ctx.webhook.get("endpoint_id")
        if rt is None or not endpoint_id or not len(rt.registries.llm_providers):
            return None
        triage = await store.load(rt, str(endpoint_id))
        if triage is None:
            return None
        if ctx.external_id is not None and await rt.store.is_recorded(
            str(ctx.envelope.get("source")), ctx.external_id
        ):
            # A redelivery: the store reports the first delivery's todos whatever is
            # decided now, so asking the model again would only spend the budget.
            return None
        granted = {ctx.grant.target_queue, *ctx.grant.queues}
        # Only queues the delivery may still reach are offered: a revoked one never is.
        offered = [q for q in triage["queues"] if q["name"] in granted]
        if not offered:
            return None
        return triage, offered

    async def defers(self, ctx: RoutingContext) -> bool:
        """A live delivery goes pending only when the model would be asked."""
        return await self._work(ctx) is not None

    def gave_up(self, ctx: RoutingContext, attempts: int) -> StageResult:
        """Every claim's worker died or stalled: the default, cause ``llm_error``."""
        return self._fallback(
            ctx,
            CAUSE_LLM_ERROR,
            {},
            f"no decision after {attempts} attempts (each lost its lease: the worker was"
            " killed or stalled mid-call)",
        )

    async def route(self, ctx: RoutingContext) -> StageResult:
        rt = ctx.runtime
        work = await self._work(ctx)
        if rt is None or work is None:
            return StageResult()
        triage, offered = work
        info: dict[str, Any] = {"provider": triage["provider"], "model": triage["model"]}
        provider = rt.registries.llm_providers.get(triage["provider"])
        if provider is None:
            return self._fallback(
                ctx, CAUSE_LLM_ERROR, info, f"provider {triage['provider']!r} is not configured"
            )
        if not ctx.deferred:
            return await self._ask(ctx, triage, offered, provider, info)
        # Deferred, the provider's calls at once are capped across the service: past the
        # cap the event stays pending (in the database) and is claimed again shortly.
        cap = _positive(getattr(provider, "max_in_flight", None), DEFAULT_PROVIDER_IN_FLIGHT)
        lease_s = self._timeout_ms(triage) / 1000 + 5
        slot = await self._slots.take(rt, triage["provider"], cap, lease_s)
        if slot is None:
            raise NotYet(
                f"provider {triage['provider']!r} has its {cap} calls in flight", _BUSY_RETRY_S
            )
        try:
            return await self._ask(ctx, triage, offered, provider, info)
        finally:
            await self._slots.give(rt, triage["provider"], slot)

    def _timeout_ms(self, triage: dict[str, Any]) -> int:
        """The endpoint's model call timeout, under the operator's ceiling."""
        return int(min(triage["timeout_ms"], self.settings["max_timeout_ms"]))

    async def _ask(
        self,
        ctx: RoutingContext,
        triage: dict[str, Any],
        offered: list[dict[str, Any]],
        provider: Any,
        info: dict[str, Any],
    ) -> StageResult:
        """Spend the endpoint's budget on one call to the model, and read its answer."""
        rt = ctx.runtime
        assert rt is not None  # route() asked only with a runtime
        endpoint_id = str(ctx.webhook["endpoint_id"])
        timeout_ms = self._timeout_ms(triage)
        prompt = build_prompt(
            event_view(ctx.envelope, rt.registries.projections),
            offered,
            payload=ctx.envelope.get("payload"),
            include_payload=bool(triage["include_payload"])
            and bool(self.settings["allow_include_payload"]),
            max_payload_bytes=int(self.settings["max_payload_bytes"]),
        )
        got = await self._reserve(ctx, triage, SYSTEM + prompt, provider, timeout_ms)
        if not isinstance(got, store.Reservation):
            return self._fallback(ctx, CAUSE_LLM_BUDGET_EXHAUSTED, info, got)
        held = got
        schema = answer_schema([q["name"] for q in offered])
        started = time.monotonic()
        try:
            text = await asyncio.wait_for(
                provider.complete(triage["model"], SYSTEM, prompt, schema, timeout_ms / 1000),
                timeout_ms / 1000,
            )
        except asyncio.CancelledError:
            # Stopped mid-call (a SIGTERM past the grace): the tokens it held go back, its
            # prompt's estimate is counted (it was sent), and the event is asked again.
            with contextlib.suppress(Exception):
                await store.settle(rt, endpoint_id, held, math.ceil(len(SYSTEM + prompt) / 4))
            raise
        except TimeoutError as exc:
            info["latency_ms"] = _since(started)
            await self._account(rt, endpoint_id, held, info, SYSTEM + prompt, None, exc)
            return self._fallback(ctx, CAUSE_LLM_TIMEOUT, info, f"no answer within {timeout_ms} ms")
        except Exception as exc:  # a provider's failure is a fallback, never a lost delivery
            info["latency_ms"] = _since(started)
            await self._account(rt, endpoint_id, held, info, SYSTEM + prompt, None, exc)
            detail = _describe(exc)
            # Quoted (repr): a third party's error text may hold a line break.
            log.warning(
                "llm triage for endpoint %s: provider %r failed: %r",
                endpoint_id,
                triage["provider"],
                _cut(detail, _DETAIL_MAX),
            )
            return self._fallback(ctx, CAUSE_LLM_ERROR, info, detail)
        info["latency_ms"] = _since(started)
        await self._account(rt, endpoint_id, held, info, SYSTEM + prompt, text)
        if not isinstance(text, str):
            return self._fallback(ctx, CAUSE_LLM_ERROR, info, "the provider returned no text")
        try:
            answer = parse_answer(text)
        except InvalidAnswer as exc:
            info["answer"] = _cut(text)
            return self._fallback(ctx, CAUSE_LLM_INVALID_ANSWER, info, str(exc))
        queue, confidence = answer["queue"], answer["confidence"]
        info.update(queue=_cut(queue), confidence=confidence, reason=_cut(answer["reason"]))
        if queue not in {q["name"] for q in offered}:
            return self._fallback(
                ctx,
                CAUSE_LLM_UNKNOWN_QUEUE,
                info,
                f"{_cut(queue, 64)!r} is not one of the offered queues",
            )
        if confidence < triage["min_confidence"]:
            return self._fallback(
                ctx,
                CAUSE_LLM_LOW_CONFIDENCE,
                info,
                f"confidence {confidence} is below {triage['min_confidence']}",
            )
        trace: dict[str, Any] = {"stage": STAGE_LLM, "action": {"queue": queue}, "llm": info}
        if ctx.faults:
            trace["faults"] = [f.to_json() for f in ctx.faults]
        return StageResult(
            Decision(drop=False, queue=queue, endpoints=tuple(ctx.grant.endpoint_ids), trace=trace)
        )

    async def _reserve(
        self,
        ctx: RoutingContext,
        triage: dict[str, Any],
        sent: str,
        provider: Any,
        timeout_ms: int,
    ) -> store.Reservation | str:
        """One prompt and the call's estimated tokens from the endpoint's budgets, or why
        not (the detail of a spent budget). Raises :class:`NotYet` when a deferred event
        should wait: for tokens calls in flight hold now, or (``on_budget = "wait"``) for
        the spent window to turn."""
        rt = ctx.runtime
        assert rt is not None
        endpoint_id = str(ctx.webhook["endpoint_id"])
        per_minute = min(
            triage["prompt_budget_per_minute"], self.settings["max_prompt_budget_per_minute"]
        )
        per_day = min(triage["prompt_budget_per_day"], self.settings["max_prompt_budget_per_day"])
        tokens = triage.get("token_budget_per_minute"), triage.get("token_budget_per_day")
        deadline = time.monotonic() + min(timeout_ms / 1000, _HELD_WAIT_MAX_S)
        while True:
            guess = 0
            if tokens != (None, None):
                guess = await store.estimate(
                    rt, endpoint_id, math.ceil(len(sent) / 4), getattr(provider, "max_tokens", None)
                )
            got = await store.reserve_call(
                rt,
                endpoint_id,
                per_minute,
                per_day,
                tokens_per_minute=tokens[0],
                tokens_per_day=tokens[1],
                estimate=guess,
            )
            if isinstance(got, store.Reservation):
                return got
            span, what = got
            if what != store.HELD:
                break
            # Calls in flight hold the tokens that are left: whether they leave room for
            # this one is known when they settle (moments, not a window).
            if ctx.deferred:
                raise NotYet(f"the {span}'s tokens are held by calls in flight", _BUSY_RETRY_S)
            if time.monotonic() + _HELD_POLL_S > deadline:
                return f"the {span}'s tokens are held by calls in flight"
            await asyncio.sleep(_HELD_POLL_S)
        if what == store.TOKENS:
            limit = triage[f"token_budget_per_{span}"]
        else:
            limit = per_minute if span == store.MINUTE else per_day
        detail = f"the {span}'s budget of {limit} {what} is spent"
        if ctx.deferred and triage.get("on_budget") == "wait":
            # Deferred, the event can wait for the window to turn (never in memory).
            raise NotYet(detail, _until_next(span))
        return detail

    @staticmethod
    async def _account(
        rt: Any,
        endpoint_id: str,
        held: store.Reservation,
        info: dict[str, Any],
        sent: str,
        text: Any,
        failure: BaseException | None = None,
    ) -> None:
        """The call's tokens: the provider's usage, else an estimate (marked), counted
        against the endpoint's token budget and in ``switchboard_llm_tokens_total``.

        A ``failure`` whose request never left (``sent = False``: no connection) reached
        no model: its prompt and the tokens it held go back, and nothing is counted.
        """
        if failure is not None and getattr(failure, "sent", True) is False:
            try:
                await store.give_back(rt, endpoint_id, held)
            except Exception as exc:  # the budget's bookkeeping never costs the decision
                log.warning("llm triage: prompt not given back: %s", type(exc).__name__)
            return
        reported = text.usage if isinstance(text, Completion) else None
        if reported is not None and "prompt_tokens" in reported:
            usage: dict[str, Any] = {
                "prompt_tokens": int(reported["prompt_tokens"]),
                "completion_tokens": int(reported.get("completion_tokens", 0)),
            }
        else:
            # About four characters a token: what a failed or silent call may have cost.
            answer = text if isinstance(text, str) else ""
            usage = {
                "prompt_tokens": math.ceil(len(sent) / 4),
                "completion_tokens": math.ceil(len(answer) / 4),
                "estimated": True,
            }
        info["usage"] = usage
        LLM_TOKENS.labels("prompt").inc(usage["prompt_tokens"])
        LLM_TOKENS.labels("completion").inc(usage["completion_tokens"])
        try:
            await store.settle(
                rt, endpoint_id, held, usage["prompt_tokens"] + usage["completion_tokens"]
            )
        except Exception as exc:  # the budget's bookkeeping never costs the decision
            log.warning("llm triage: tokens not counted: %s", type(exc).__name__)

    @staticmethod
    def _fallback(
        ctx: RoutingContext, cause: str, info: dict[str, Any], detail: str
    ) -> StageResult:
        """The deterministic default, with why and what the model said."""
        info["detail"] = _cut(detail, _DETAIL_MAX)
        decision = default_decision(ctx.grant, ctx.config.default_action, ctx.faults, cause=cause)
        decision.trace["llm"] = info
        return StageResult(decision)


def _until_next(span: str) -> float:
    """Seconds until the next UTC minute or day (the budget's window) begins, plus one."""
    length = 60 if span == store.MINUTE else 86400
    return length - time.time() % length + 1


def _positive(value: Any, default: int) -> int:
    return (
        value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default
    )


def _since(started: float) -> int:
    return max(0, round((time.monotonic() - started) * 1000))


def _cut(text: str, limit: int = _ANSWER_MAX) -> str:
    return text[:limit]


def _describe(exc: Exception) -> str:
    text = str(exc)
    return text if text else type(exc).__name__
