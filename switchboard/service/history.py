"""Change rules with evidence: a candidate vs the saved config over stored deliveries, "why not"
per rule, and lint from real traffic. Saves nothing.

Every verdict comes from the enabled stage that reports them (:class:`VerdictStage`: the rules
stage's sandbox, as live routing evaluates); the server only decides, under the grant as it
is now, with the same ``decide`` as a live delivery. The LLM triage stage is not run.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import Any

from ..errors import InvalidArgument, NotFound, ServiceError
from ..routing.config import validate_config
from ..routing.decide import decide
from ..routing.model import Decision, Grant, RoutingConfig
from ..routing.replay import raw_body, sample_envelope, stored_envelope
from ..routing.route import config_of, grant_for
from ..routing.verdicts import VerdictStage, explained, match_of, verdict_stage
from ..runtime import Runtime
from ..store import Row
from .common import jsonable
from .lint import lint_findings
from .replay import Clock, Progress, Window, count_window, evaluated, window_of
from .versions import config_hash
from .webhooks import owned_webhook

#: Changed events listed per page of ``diff_rules`` (then ``next_cursor``).
CHANGES_PAGE = 100
#: The window of ``last`` when neither ``last`` nor ``since`` is given.
DEFAULT_LAST = 1000


def _stage(rt: Runtime) -> VerdictStage:
    stage = verdict_stage(rt.stages)
    if stage is None:
        raise ServiceError(
            "no enabled routing stage reports rule verdicts (the rules plugin is disabled)",
            code="unavailable",
        )
    return stage


async def _webhook(rt: Runtime, caller: Row | None, webhook_id: str) -> tuple[Row, Row, Grant]:
    """The owned webhook row, its resolved row (targets) and its grant as it is now."""
    row = await owned_webhook(rt, caller, webhook_id)
    resolved = await rt.store.resolve_webhook_by_id(row["id"])
    if resolved is None:
        raise NotFound(f"webhook {webhook_id} not found")
    return row, resolved, grant_for(resolved)


def _candidate_doc(
    saved: RoutingConfig, rules: Any, default_action: Any, params: Any
) -> dict[str, Any]:
    """The candidate as ``test_webhook_rules`` builds it: given rules replace the whole config,
    else the saved rules with the given default action and params."""
    if rules is not None:
        doc = {"rules": rules, "default_action": default_action, "params": params}
        if saved.on_fault != "default":  # kept by a save too: the hash is the save's
            doc["on_fault"] = saved.on_fault
        return doc
    doc = saved.to_json()
    if default_action is not None:
        doc["default_action"] = default_action
    if params is not None:
        doc["params"] = params
    return doc


def decision_view(decision: Decision) -> dict[str, Any]:
    """A decision for reading: where it goes and what decided it (the deciding rule's id)."""
    trace = decision.trace
    view: dict[str, Any] = {
        **decision.to_json(),
        "stage": trace.get("stage"),
        "rule_id": trace.get("rule_id"),
        "rule_index": trace.get("rule_index"),
    }
    if trace.get("cause"):
        view["cause"] = trace["cause"]
    if trace.get("faults"):
        view["faults"] = trace["faults"]
    return view


def _same(a: Decision, b: Decision) -> bool:
    return a.drop == b.drop and a.queue == b.queue and a.endpoints == b.endpoints


class _Totals:
    """Per outcome: events per queue, todos per endpoint, drops, defaults, faults by cause."""

    def __init__(self) -> None:
        self.queues: Counter[str] = Counter()
        self.endpoints: Counter[str] = Counter()
        self.rules: Counter[str] = Counter()
        self.faults: Counter[str] = Counter()
        self.drop = 0
        self.default = 0

    def add(self, decision: Decision) -> None:
        trace = decision.trace
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
        }


async def diff_rules(
    rt: Runtime,
    caller: Row | None,
    webhook_id: str,
    *,
    rules: Any = None,
    default_action: Any = None,
    params: Any = None,
    last: Any = None,
    since: Any = None,
    cursor: Any = None,
    changes_cursor: Any = None,
    progress: Progress | None = None,
    page: int = CHANGES_PAGE,
) -> dict[str, Any]:
    """The saved config and a candidate over the webhook's stored events; saves nothing.

    The window is the newest ``last`` events (default :data:`DEFAULT_LAST`), or those since
    ``since`` (a duration back from now, or a timestamp), newest first. One call evaluates
    the whole window, unless the stage's ``history_max_events`` or ``history_deadline_s``
    cuts it (``stopped`` says which; ``next_cursor``, with the same candidate, goes on from
    there). ``evaluated``, ``changed`` and ``totals`` count every event evaluated; only the
    list of changed events is paged: ``changes`` holds the first ``page``, and
    ``changes_cursor`` lists the next ones (that call answers ``changes`` alone, no totals).
    ``candidate_hash`` is what ``set_webhook_rules {diffed}`` and ``[routing] require_diff``
    check; each whole-window diff is remembered for that.
    """
    stage = _stage(rt)
    row, resolved, grant = await _webhook(rt, caller, webhook_id)
    saved = config_of(row)
    candidate = await validate_config(
        _candidate_doc(saved, rules, default_action, params), grant, rt.stages, resolved
    )
    if cursor is not None and changes_cursor is not None:
        raise InvalidArgument("give at most one of cursor or changes_cursor")
    listing = changes_cursor is not None
    window = window_of(
        last, since, changes_cursor if listing else cursor, default_last=DEFAULT_LAST
    )
    cap = stage.history_max_events
    total = await count_window(rt, row["id"], window, cap) if progress is not None else None
    clock = Clock(stage.history_deadline_s, progress, total)
    sides = (_Totals(), _Totals())
    changes: list[dict[str, Any]] = []
    changed, taken, stopped, last_row = 0, 0, None, None
    newest: Row | None = None
    listed: tuple[Row, int] | None = None  # the last change listed, and where it was
    more = False  # a listing call found a change past its page
    stream = evaluated(rt, stage, resolved, (saved, candidate), window, limit=cap)
    async with contextlib.aclosing(stream) as events:
        async for item in events:
            was = decide(saved, match_of(saved, item.verdicts[0]), grant)
            now = decide(candidate, match_of(candidate, item.verdicts[1]), grant)
            if not _same(was, now):
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
                            "saved": decision_view(was),
                            "candidate": decision_view(now),
                        }
                    )
                    listed = (item.row, taken + 1)
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
    """Every rule's verdict on one stored event (or a sample payload), in order, and the
    decision: ``matched``, ``false``, ``null``, ``error`` (with its message) or
    ``not_reached`` (an earlier rule matched; ``would`` says what it would have said)."""
    stage = _stage(rt)
    if (event_id is None) == (payload is None):
        raise InvalidArgument("give exactly one of event_id or payload")
    row, resolved, grant = await _webhook(rt, caller, webhook_id)
    config = config_of(row)
    if rules is not None or default_action is not None or params is not None:
        config = await validate_config(
            _candidate_doc(config, rules, default_action, params), grant, rt.stages, resolved
        )
    out: dict[str, Any] = {"webhook_id": row["id"]}
    if event_id is not None:
        event = await rt.store.get_event(event_id)
        if event is None or event["webhook_id"] != row["id"]:
            raise NotFound(f"event {event_id} not found")
        envelope = stored_envelope(rt.registries.projections, event, row["id"])
        out["event_id"] = str(event["id"])
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
    [(verdicts,)] = await stage.verdicts((config,), [envelope], webhook=resolved)
    decision = decide(config, match_of(config, verdicts), grant)
    out.update(
        decision=decision_view(decision), verdicts=explained(config, verdicts), trace=decision.trace
    )
    return out


async def explain_stored(rt: Runtime, caller: Row | None, event_id: str) -> dict[str, Any]:
    """:func:`explain_event` by the event's id alone (its webhook read from the event)."""
    event = await rt.store.get_event(event_id)
    if event is None or not event.get("webhook_id"):
        raise NotFound(f"event {event_id} not found")
    try:
        return await explain_event(rt, caller, str(event["webhook_id"]), event_id=event_id)
    except NotFound:
        raise NotFound(f"event {event_id} not found") from None


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
    stage = _stage(rt)
    row, resolved, _grant = await _webhook(rt, caller, webhook_id)
    config = config_of(row)
    window = window_of(last, None, None, default_last=DEFAULT_LAST)
    cap = stage.history_max_events
    total = await count_window(rt, row["id"], window, cap) if progress is not None else None
    clock = Clock(stage.history_deadline_s, progress, total)
    n = len(config.rules)
    matched, faulted, won = [0] * n, [0] * n, [0] * n
    shadows: list[Counter[int]] = [Counter() for _ in range(n)]
    taken, stopped = 0, None
    if n:
        stream = evaluated(rt, stage, resolved, (config,), window, limit=cap)
        async with contextlib.aclosing(stream) as events:
            async for item in events:
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
                taken += 1
                await clock.tick(taken)
                if clock.expired():
                    stopped = "deadline"
                    break
        if stopped is None and taken >= cap and (window.remaining or 0) > taken:
            stopped = "max_events"
    await clock.tick(taken, force=True)
    findings = lint_findings(config, taken, matched, faulted, won, shadows)
    out: dict[str, Any] = {"webhook_id": row["id"], "evaluated": taken, "findings": findings}
    if stopped is not None:
        out["stopped"] = stopped
    return out


__all__ = ["Window", "decision_view", "diff_rules", "explain_event", "explain_stored", "lint_rules"]
