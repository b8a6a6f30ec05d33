"""Change rules with evidence: a candidate vs the saved config over stored deliveries, "why not"
per rule, and lint from real traffic. Saves nothing.

Every stored delivery is replayed through every enabled stage, in order, with live routing's
own loop (``routing.stagereplay``): the rules' verdicts come from the stage that reports
them (:class:`VerdictStage`: the rules stage's sandbox, as live routing evaluates), a stage
that declares ``replay = "stored"`` (the llm stage) is never asked again (its verdict is read
from the event's trace), and any other stage is re-run on the stored envelope. The server
decides under the grant as it is now, with the same ``decide`` as a live delivery.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import Any

from ..contract.routing import REPLAY_STORED, SAID_UNKNOWN, RuleVerdict, replay_of
from ..errors import InvalidArgument, NotFound
from ..routing.config import validate_config
from ..routing.model import Decision, Grant, RoutingConfig
from ..routing.replay import raw_body, sample_envelope, stored_envelope
from ..routing.route import config_of, grant_for
from ..routing.stagecall import stage_timeout_ms
from ..routing.stagereplay import Replayed, needs_envelope, replay
from ..routing.verdicts import VerdictStage, explained, verdict_stage
from ..runtime import Runtime
from ..store import Row
from .common import clip, jsonable
from .lint import lint_findings
from .replay import Clock, Progress, Window, call_window, count_window, evaluated
from .versions import config_hash
from .webhooks import owned_webhook

#: Changed events listed per page of ``diff_rules`` (then ``next_cursor``).
CHANGES_PAGE = 100


#: History's bounds when no enabled stage declares its own (``history_max_events``, ...).
DEFAULT_MAX_EVENTS = 10000
DEFAULT_DEADLINE_S = 30.0
#: Event ids listed per stored stage in a diff's ``not_reasked``.
NOT_REASKED_IDS = 100


class _Replay:
    """What one history call replays with: the enabled stages in order, the one reporting
    rule verdicts (if any), the bounds, and the webhook and grant as they are now."""

    def __init__(self, rt: Runtime, webhook: Row, grant: Grant, *, upto_verdicts: bool = False):
        stages = list(rt.stages)
        self.verdict: VerdictStage | None = verdict_stage(stages)
        if upto_verdicts and self.verdict is not None:
            # lint: only what runs before the rules decides whether they are reached
            stages = stages[: stages.index(self.verdict) + 1]  # type: ignore[arg-type]
        self.stages = stages
        self.rt, self.webhook, self.grant = rt, webhook, grant
        self.max_events = (
            self.verdict.history_max_events if self.verdict is not None else DEFAULT_MAX_EVENTS
        )
        self.deadline_s = (
            self.verdict.history_deadline_s if self.verdict is not None else DEFAULT_DEADLINE_S
        )
        self.keep_envelopes = needs_envelope(stages, self.verdict)
        self.timeout_ms = stage_timeout_ms(rt)
        self.stored = [s.name for s in stages if replay_of(s) == REPLAY_STORED]

    async def run(
        self,
        config: RoutingConfig,
        verdicts: list[RuleVerdict],
        envelope: dict[str, Any] | None,
        trace: Any,
    ) -> Replayed:
        return await replay(
            self.stages,
            self.webhook,
            config,
            envelope,
            self.grant,
            stored_trace=trace if isinstance(trace, dict) else None,
            verdict_stage=self.verdict,
            verdicts=verdicts,
            runtime=self.rt,
            stage_timeout_ms=self.timeout_ms,
        )


async def _webhook(rt: Runtime, caller: Row | None, webhook_id: str) -> tuple[Row, Row, Grant]:
    """The owned webhook row, its resolved row (targets) and its grant as it is now."""
    row = await owned_webhook(rt, caller, webhook_id)
    resolved = await rt.store.resolve_webhook_by_id(row["id"])
    if resolved is None:
        raise NotFound(f"webhook {clip(webhook_id)} not found")
    return row, resolved, grant_for(resolved)


def _candidate_doc(
    saved: RoutingConfig,
    rules: Any,
    default_action: Any,
    params: Any,
    *,
    on_fault: Any = None,
    lanes: Any = None,
) -> dict[str, Any]:
    """The candidate as a save with the same arguments stores it (so that its hash is the
    save's, for ``[routing] require_diff``): given rules replace the rules and the default
    action, else the saved rules with the given default action; params, ``on_fault`` and
    ``lanes`` not given are the saved ones (as ``set_webhook_rules`` keeps them)."""
    doc = saved.to_json()
    if rules is not None:
        doc["rules"] = rules
        doc["default_action"] = default_action
    elif default_action is not None:
        doc["default_action"] = default_action
    if params is not None:
        doc["params"] = params
    if on_fault is not None:
        doc["on_fault"] = on_fault
    if lanes is not None:
        doc["lanes"] = lanes  # {}: no lane keeps a TTL
    return doc


def decision_view(decision: Decision, replayed: Replayed | None = None) -> dict[str, Any]:
    """A decision for reading: where it goes and what decided it (the deciding stage's name
    in ``decided_by``, the deciding rule's id; ``replay: "stored"`` when the deciding stage
    was not re-asked and its stored verdict was taken)."""
    trace = decision.trace
    view: dict[str, Any] = {
        **decision.to_json(),
        "stage": trace.get("stage"),
        "rule_id": trace.get("rule_id"),
        "rule_index": trace.get("rule_index"),
    }
    if replayed is not None:
        view["decided_by"] = replayed.decided_by
        if replayed.stored is not None:
            view["replay"] = REPLAY_STORED
    if trace.get("cause"):
        view["cause"] = trace["cause"]
    if trace.get("faults"):
        view["faults"] = trace["faults"]
    return view


def _same(a: Decision, b: Decision) -> bool:
    return a.drop == b.drop and a.queue == b.queue and a.endpoints == b.endpoints


class _Totals:
    """Per outcome: events per queue, todos per endpoint, drops, defaults, faults by cause,
    decisions by stage, and the stored stages' decisions (taken, not re-asked) and unknowns."""

    def __init__(self) -> None:
        self.stages: Counter[str] = Counter()
        self.stored: Counter[str] = Counter()
        self.unknown: Counter[str] = Counter()
        self.queues: Counter[str] = Counter()
        self.endpoints: Counter[str] = Counter()
        self.rules: Counter[str] = Counter()
        self.faults: Counter[str] = Counter()
        self.drop = 0
        self.default = 0

    def add(self, replayed: Replayed) -> None:
        decision = replayed.decision
        trace = decision.trace
        self.stages[replayed.decided_by] += 1
        if replayed.stored is not None:
            self.stored[replayed.stored.stage] += 1
        self.unknown.update(s.stage for s in replayed.said if s.said == SAID_UNKNOWN)
        if decision.drop:
            self.drop += 1
        elif decision.queue is not None:
            self.queues[decision.queue] += 1
            self.endpoints.update(decision.endpoints)
        if trace.get("stage") == "default":
            self.default += 1
        elif trace.get("rule_id"):
            self.rules[str(trace["rule_id"])] += 1
        self.faults.update(f["cause"] for f in trace.get("faults") or ())

    def view(self) -> dict[str, Any]:
        return {
            "queues": dict(self.queues),
            "endpoints": dict(self.endpoints),
            "drop": self.drop,
            "default": self.default,
            "rules": dict(self.rules),
            "faults": dict(self.faults),
            "stages": dict(self.stages),
            "stored": dict(self.stored),
            "unknown": dict(self.unknown),
        }


async def diff_rules(
    rt: Runtime,
    caller: Row | None,
    webhook_id: str,
    *,
    rules: Any = None,
    default_action: Any = None,
    params: Any = None,
    on_fault: Any = None,
    lanes: Any = None,
    last: Any = None,
    since: Any = None,
    cursor: Any = None,
    changes_cursor: Any = None,
    progress: Progress | None = None,
    page: int = CHANGES_PAGE,
) -> dict[str, Any]:
    """The saved config and a candidate over the webhook's stored events; saves nothing.

    The window is the newest ``last`` events (default :data:`.replay.DEFAULT_LAST`), or those since
    ``since`` (a duration back from now, or a timestamp), newest first. One call evaluates
    the whole window, unless the stage's ``history_max_events`` or ``history_deadline_s``
    cuts it (``stopped`` says which; ``next_cursor``, with the same candidate, goes on from
    there). ``evaluated``, ``changed`` and ``totals`` count every event evaluated; only the
    list of changed events is paged: ``changes`` holds the first ``page``, and
    ``changes_cursor`` lists the next ones (that call answers ``changes`` alone, no totals).
    ``candidate_hash`` is what ``set_webhook_rules {diffed}`` and ``[routing] require_diff``
    check; each whole-window diff is remembered for that. The candidate is what a save with
    the same arguments would store: params, ``on_fault`` and ``lanes`` not given are the
    saved ones, and ``on_fault``/``lanes`` alone diff a ``set_webhook_policy`` save.
    """
    row, resolved, grant = await _webhook(rt, caller, webhook_id)
    rp = _Replay(rt, resolved, grant)
    saved = config_of(row)
    candidate = await validate_config(
        _candidate_doc(saved, rules, default_action, params, on_fault=on_fault, lanes=lanes),
        grant,
        rt.stages,
        resolved,
    )
    if cursor is not None and changes_cursor is not None:
        raise InvalidArgument("give at most one of cursor or changes_cursor")
    listing = changes_cursor is not None
    window = call_window(last, since, cursor, changes_cursor)
    cap = rp.max_events
    total = await count_window(rt, row["id"], window, cap) if progress is not None else None
    clock = Clock(rp.deadline_s, progress, total)
    sides = (_Totals(), _Totals())
    changes: list[dict[str, Any]] = []
    not_reasked: dict[str, list[str]] = {name: [] for name in rp.stored}
    changed, taken, stopped, last_row = 0, 0, None, None
    newest: Row | None = None
    listed: tuple[Row, int] | None = None  # the last change listed, and where it was
    more = False  # a listing call found a change past its page
    stream = evaluated(
        rt,
        rp.verdict,
        resolved,
        (saved, candidate),
        window,
        limit=cap,
        keep_envelopes=rp.keep_envelopes,
    )
    async with contextlib.aclosing(stream) as events:
        async for item in events:
            trace = item.row.get("routing_trace")
            was = await rp.run(saved, item.verdicts[0], item.envelope, trace)
            now = await rp.run(candidate, item.verdicts[1], item.envelope, trace)
            if not _same(was.decision, now.decision):
                if len(changes) >= page and listing:
                    more = True
                    break
                changed += 1
                if len(changes) < page:
                    changes.append(
                        {
                            "event_id": str(item.row["id"]),
                            "received_at": jsonable(item.row["received_at"]),
                            "kind": item.row.get("kind"),
                            "saved": decision_view(was.decision, was),
                            "candidate": decision_view(now.decision, now),
                        }
                    )
                    listed = (item.row, taken + 1)
            for side in {s.stage for s in (was.stored, now.stored) if s is not None}:
                if len(not_reasked[side]) < NOT_REASKED_IDS:
                    not_reasked[side].append(str(item.row["id"]))
            sides[0].add(was)
            sides[1].add(now)
            taken += 1
            newest = newest or item.row
            last_row = item.row
            await clock.tick(taken)
            if clock.expired():
                stopped = "deadline"
                break
    if (
        stopped is None
        and not more
        and last_row is not None
        and taken >= cap
        and (window.remaining is None or taken < window.remaining)
    ):
        stopped = "max_events"
    await clock.tick(taken, force=True)
    digest = config_hash(candidate.to_json())
    out: dict[str, Any] = {"webhook_id": row["id"], "candidate_hash": digest}
    if not listing:
        out.update(
            evaluated=taken,
            changed=changed,
            totals={"saved": sides[0].view(), "candidate": sides[1].view()},
        )
        out["window"] = {
            "last": window.remaining,
            "since": None if window.since is None else jsonable(window.since),
            "newest": None if newest is None else jsonable(newest["received_at"]),
            "oldest": None if last_row is None else jsonable(last_row["received_at"]),
        }
        await rt.store.record_diff(str(row["id"]), digest, taken)
        if not_reasked:
            # The stored stages were not asked again: their verdicts are the events' traces.
            out["not_reasked"] = {
                name: {
                    "decided": sides[0].stored.get(name, 0),
                    "decided_candidate": sides[1].stored.get(name, 0),
                    "event_ids": ids,
                    "detail": f"stage {name!r} is replayed from each event's stored trace: it"
                    " was not asked again (saved and candidate decisions it made are its"
                    " stored ones)",
                }
                for name, ids in not_reasked.items()
            }
    out["changes"] = changes
    if listed is not None and (more or changed > len(changes)):
        out["changes_cursor"] = window.cursor(*listed)
    elif listing and stopped is not None and last_row is not None:
        out["changes_cursor"] = window.cursor(last_row, taken)
    if stopped is not None and last_row is not None:
        if not listing:
            out["next_cursor"] = window.cursor(last_row, taken)
        out["stopped"] = stopped
    return out


async def explain_event(
    rt: Runtime,
    caller: Row | None,
    webhook_id: str,
    *,
    event_id: str | None = None,
    payload: Any = None,
    headers: dict[str, str] | None = None,
    rules: Any = None,
    default_action: Any = None,
    params: Any = None,
) -> dict[str, Any]:
    """What each stage said on one stored event (or a sample payload), in stage order
    (``stages``: decided, passed, faulted, not_reached, or unknown for a stored stage never
    asked), every rule's verdict (``matched``, ``false``, ``null``, ``error`` with its
    message, or ``not_reached``: an earlier rule matched, or an earlier stage decided, with
    ``would``: what it would have said), and the decision, as live routing takes it."""
    if (event_id is None) == (payload is None):
        raise InvalidArgument("give exactly one of event_id or payload")
    row, resolved, grant = await _webhook(rt, caller, webhook_id)
    rp = _Replay(rt, resolved, grant)
    config = config_of(row)
    if rules is not None or default_action is not None or params is not None:
        config = await validate_config(
            _candidate_doc(config, rules, default_action, params), grant, rt.stages, resolved
        )
    out: dict[str, Any] = {"webhook_id": row["id"]}
    stored: Any = None
    if event_id is not None:
        event = await rt.store.get_event(event_id)
        if event is None or event["webhook_id"] != row["id"]:
            raise NotFound(f"event {clip(event_id)} not found")
        envelope = stored_envelope(rt.registries.projections, event, row["id"])
        out["event_id"] = str(event["id"])
        stored = event.get("routing_trace")
    else:
        if headers is not None and not isinstance(headers, dict):
            raise InvalidArgument("headers: must be an object of header names to values")
        envelope = sample_envelope(
            rt.registries.projections,
            sources=rt.registries.sources,
            source=row["source_type"],
            trust_mode=row["trust_mode"],
            webhook_id=row["id"],
            body=raw_body(payload),
            headers={str(k): str(v) for k, v in (headers or {}).items()},
        )
    verdicts: list[RuleVerdict] = []
    if rp.verdict is not None:
        [(verdicts,)] = await rp.verdict.verdicts((config,), [envelope], webhook=resolved)
    replayed = await rp.run(config, verdicts, envelope, stored)
    decision = replayed.decision
    before = None
    if rp.verdict is not None and not replayed.reached(rp.verdict.name):
        before = replayed.ended_by
    out.update(
        decision=decision_view(decision, replayed),
        stages=[s.to_json() for s in replayed.said],
        verdicts=explained(config, verdicts, before=before),
        trace=decision.trace,
    )
    return out


async def explain_stored(rt: Runtime, caller: Row | None, event_id: str) -> dict[str, Any]:
    """:func:`explain_event` by the event's id alone (its webhook read from the event)."""
    event = await rt.store.get_event(event_id)
    if event is None or not event.get("webhook_id"):
        raise NotFound(f"event {clip(event_id)} not found")
    try:
        return await explain_event(rt, caller, str(event["webhook_id"]), event_id=event_id)
    except NotFound:
        raise NotFound(f"event {clip(event_id)} not found") from None


async def lint_rules(
    rt: Runtime,
    caller: Row | None,
    webhook_id: str,
    *,
    last: Any = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """The saved rules over the newest ``last`` stored events: rules that never matched, that
    only ever faulted, that an earlier rule shadowed on every event they matched, and params
    no rule reads. Bounded like :func:`diff_rules` (``stopped`` says when it stopped early)."""
    row, resolved, grant = await _webhook(rt, caller, webhook_id)
    rp = _Replay(rt, resolved, grant, upto_verdicts=True)
    config = config_of(row)
    window = call_window(last, None, None, None)
    cap = rp.max_events
    total = await count_window(rt, row["id"], window, cap) if progress is not None else None
    clock = Clock(rp.deadline_s, progress, total)
    n = len(config.rules)
    matched, faulted, won = [0] * n, [0] * n, [0] * n
    shadows: list[Counter[int]] = [Counter() for _ in range(n)]
    taken, stopped, passed_over = 0, None, 0
    if n and rp.verdict is not None:
        rules_stage = rp.verdict.name
        before_rules = len(rp.stages) > 1
        stream = evaluated(
            rt,
            rp.verdict,
            resolved,
            (config,),
            window,
            limit=cap,
            keep_envelopes=rp.keep_envelopes,
        )
        async with contextlib.aclosing(stream) as events:
            async for item in events:
                taken += 1
                if before_rules:
                    trace = item.row.get("routing_trace")
                    replayed = await rp.run(config, item.verdicts[0], item.envelope, trace)
                    if not replayed.reached(rules_stage):
                        # an earlier stage decided: the rules never saw this delivery
                        passed_over += 1
                        await clock.tick(taken)
                        if clock.expired():
                            stopped = "deadline"
                            break
                        continue
                first: int | None = None
                for i, verdict in enumerate(item.verdicts[0]):
                    if verdict.verdict == "matched":
                        matched[i] += 1
                        if first is None:
                            first = i
                            won[i] += 1
                        else:
                            shadows[i][first] += 1
                    elif verdict.verdict == "error":
                        faulted[i] += 1
                await clock.tick(taken)
                if clock.expired():
                    stopped = "deadline"
                    break
        if stopped is None and taken >= cap and (window.remaining or 0) > taken:
            stopped = "max_events"
    await clock.tick(taken, force=True)
    findings = lint_findings(config, taken - passed_over, matched, faulted, won, shadows)
    out: dict[str, Any] = {"webhook_id": row["id"], "evaluated": taken, "findings": findings}
    if passed_over:
        out["not_reached"] = passed_over
    if stopped is not None:
        out["stopped"] = stopped
    return out


__all__ = ["Window", "decision_view", "diff_rules", "explain_event", "explain_stored", "lint_rules"]
