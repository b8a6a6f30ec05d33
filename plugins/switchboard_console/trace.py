"""A routing trace and the rules' verdicts, told as sentences a person reads."""

from __future__ import annotations

from typing import Any

CAUSES = {
    "no_match_default": "no rule matched, so the default action applied",
    "rule_not_granted": "the matching rule's queue is outside this webhook's grant, so the"
    " default action applied",
    "default_not_granted": "the default action's queue is outside this webhook's grant",
    "llm_unknown_queue": "the LLM named a queue that does not exist",
    "llm_low_confidence": "the LLM's confidence was below the threshold",
    "llm_invalid_answer": "the LLM's answer was not a valid answer",
    "llm_error": "the LLM call failed",
    "llm_timeout": "the LLM call timed out",
    "llm_budget_exhausted": "the LLM budget was spent",
    "stage_error": "a routing stage misbehaved, so the default action applied",
    "stage_timeout": "a routing stage did not answer in time, so the default action applied",
}

VERDICTS = {
    "matched": "matched",
    "false": "did not match (the expression was false)",
    "null": "did not match (the expression gave null)",
    "error": "faulted",
    "not_reached": "was not evaluated for routing: an earlier rule matched",
}
#: Stage names in sentences (any other stage is named as it registered itself).
STAGES = {"rule": "the rules stage", "rules": "the rules stage", "llm": "the LLM triage"}
SAID = {
    "decided": "decided",
    "passed": "passed (it decided nothing)",
    "faulted": "faulted",
    "not_reached": "was not reached: an earlier stage decided",
    "unknown": "was never asked for this delivery (its verdict is not re-asked)",
}


def _rule(doc: dict[str, Any]) -> str:
    name = doc.get("rule_id") or doc.get("id")
    index = doc.get("rule_index", doc.get("index"))
    label = f"rule #{index + 1}" if isinstance(index, int) and index >= 0 else "a rule"
    return f"{label} \u201c{name}\u201d" if name else label


def _action(action: Any) -> str:
    if not isinstance(action, dict):
        return "no action"
    if action.get("drop"):
        return "dropped the delivery"
    queue = action.get("queue")
    if queue:
        to = action.get("endpoints") or []
        who = f" for {len(to)} endpoint{'s' if len(to) != 1 else ''}" if to else ""
        return f"queued it in \u201c{queue}\u201d{who}"
    return "took no queue"


def explain(trace: dict[str, Any] | None, disposition: str | None) -> list[str]:
    """Sentences, in order: the deciding stage and rule, the cause, each fault, the outcome."""
    if not trace:
        return ["No routing trace was stored for this delivery."]
    lines: list[str] = []
    stage = trace.get("stage")
    if stage == "pending":
        lines.append(
            f"Waiting for the deferred {trace.get('pending', '?')} stage: the producer got its"
            " 202, the triage worker decides it."
        )
        for fault in trace.get("faults") or ():
            detail = f": {fault['detail']}" if fault.get("detail") else ""
            lines.append(f"Fault in {_rule(fault)}: {fault.get('cause')}{detail}.")
        if disposition:
            lines.append(f"Disposition: {disposition}.")
        return lines
    if stage == "rule":
        lines.append(f"Decided by the rules stage: {_rule(trace)} matched.")
    elif stage == "default":
        lines.append("Decided by the default action.")
    elif stage == "llm":
        llm = trace.get("llm") or {}
        lines.append(
            f"Decided by the LLM triage ({llm.get('provider', '?')}"
            f" {llm.get('model', '')}).".replace(" )", ")")
        )
        if llm.get("reason"):
            lines.append(
                f"The model's reason (confidence {llm.get('confidence')}): {llm['reason']}"
            )
    else:
        lines.append(f"Decided by stage \u201c{stage}\u201d (no rule was evaluated).")
    if trace.get("cause"):
        cause = str(trace["cause"])
        lines.append("Why: " + CAUSES.get(cause, cause) + ".")
    faults = list(trace.get("faults") or ())
    # A stage that misbehaved ended routing with its fault, the trace's last (its cause is
    # the trace's); any other stage fault is one a stage reported of itself and passed.
    ended = stage == "default" and trace.get("cause") in ("stage_error", "stage_timeout")
    for n, fault in enumerate(faults):
        detail = f": {fault['detail']}" if fault.get("detail") else ""
        if fault.get("stage"):
            after = (
                " (no later stage was asked; the default action applied)."
                if ended and n == len(faults) - 1
                else " (reported by the stage itself, which passed: later stages were asked)."
            )
            lines.append(
                f"Fault in stage \u201c{fault['stage']}\u201d: {fault.get('cause')}{detail}" + after
            )
            continue
        lines.append(
            f"Fault in {_rule(fault)}: {fault.get('cause')}{detail}"
            " (treated as no match; later rules were still tried)."
        )
    lines.append(f"The action {_action(trace.get('action'))}.")
    if trace.get("once"):
        lines.append(
            {
                "claimed": "This delivery claimed its subject (a once action).",
                "repeat": "Another delivery had already claimed this subject and queue:"
                " a repeat, no todo was made.",
                "no_subject": "The delivery is about no subject; routed like any other.",
            }.get(str(trace["once"]), f"once: {trace['once']}")
        )
    deferred = trace.get("deferred")
    if isinstance(deferred, dict):
        lines.append(
            f"Decided by the triage worker after the producer's 202 ({deferred.get('stage')}:"
            f" {deferred.get('waited_ms', '?')} ms later, attempt {deferred.get('attempts')})."
        )
    if disposition:
        lines.append(f"Disposition: {disposition}.")
    return lines


def verdict_text(doc: dict[str, Any]) -> str:
    """A rule's verdict as a phrase (``decided_by``: the stage that decided before it)."""
    if doc.get("verdict") == "not_reached" and doc.get("decided_by"):
        text = (
            "was not evaluated for routing: stage"
            f" \u201c{doc['decided_by']}\u201d answered before the rules"
        )
        if doc.get("would"):
            text += f"; on its own it {VERDICTS.get(str(doc['would']), str(doc['would']))}"
        return text
    text = VERDICTS.get(str(doc.get("verdict")), str(doc.get("verdict")))
    if doc.get("verdict") == "not_reached" and doc.get("would"):
        text += f"; on its own it {VERDICTS.get(str(doc['would']), str(doc['would']))}"
    if doc.get("error"):
        text += f": {doc['error']}"
    return text


def stage_text(doc: dict[str, Any]) -> str:
    """What one stage said in a replay, as a sentence (``explain_webhook_event``'s ``stages``)."""
    name = STAGES.get(str(doc.get("stage")), f"Stage \u201c{doc.get('stage')}\u201d")
    said = SAID.get(str(doc.get("said")), str(doc.get("said")))
    text = f"{name[0].upper()}{name[1:]} {said}"
    fault = doc.get("fault") or {}
    if fault.get("detail"):
        text += f": {fault['detail']}"
    own = [f["detail"] for f in doc.get("faults") or () if f.get("stage") and f.get("detail")]
    if own:
        text += ", reporting: " + "; ".join(own)
    if doc.get("replay") == "stored" and doc.get("said") in ("decided", "faulted", "passed"):
        text += " (as stored: not asked again)"
    return text + "."


def decided_by(trace: dict[str, Any] | None, disposition: str | None = None) -> str:
    """The deciding stage and rule in a few words (a deliveries list's column); a held
    delivery names the fault that held it (what matched is not where it went)."""
    if not trace:
        return "—"
    faults = trace.get("faults") or []
    if disposition == "held" and faults:
        first = faults[0]
        where = f"stage \u201c{first['stage']}\u201d" if first.get("stage") else _rule(first)
        more = f" (+{len(faults) - 1} more)" if len(faults) > 1 else ""
        return f"held: a fault in {where}{more}"
    stage = trace.get("stage")
    if stage == "rule":
        text = _rule(trace)
    elif stage == "pending":
        text = f"waiting for {trace.get('pending', '?')}"
    else:
        text = STAGES.get(str(stage), str(stage)) if stage != "default" else "default"
    if trace.get("faults"):
        n = len(trace["faults"])
        text += f", after {n} fault{'s' if n != 1 else ''}"
    return text


def reroutes(trace: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The trace's ``reroutes`` entries, each with what it did as a phrase."""
    out = []
    for entry in (trace or {}).get("reroutes") or ():
        if isinstance(entry, dict):
            out.append({**entry, "text": _action(entry.get("action"))})
    return out


def waited(seconds: float | None) -> str:
    """An age as a person reads it: 45 s, 12 min, 3 h 5 min, 2 d 4 h."""
    if seconds is None:
        return "—"
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"
