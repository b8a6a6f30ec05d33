"""The jq program an evaluator runs: every rule wrapped to stream one verdict, or a sweep's."""

from __future__ import annotations

import json
from typing import Any

import jq

from .. import protocol as wire
from ..jqscan import shadow_prelude
from ..single import single_output

#: Starts every program built here (trial, zygote and save-time compiles alike): a forbidden
#: builtin the save-time scanner missed raises a rule error instead of running. The arities
#: come from this libjq's own ``builtins``, read once at import.
PRELUDE = shadow_prelude(jq.compile("builtins").input_value(None).first())


def build_program(
    exprs: list[str],
    indices: list[int],
    *,
    exact: bool = False,
    start: int = 0,
    stop: int | None = None,
    sweep: bool = False,
) -> str:
    """One program over ``[start, envelope]`` streaming one verdict per rule.

    A rule's verdict is its first output's truthiness, a null told apart from false for
    "why not": ``true`` for a truthy first output, else that output itself (``false`` or
    ``null``), which needs no comparison and no string (jq time for 32 rules 105 -> 91 us
    against the strings ``"m"``/``"n"``/``"z"``). After the first output ``break`` ends
    the rule (what ``first`` does, without its ``reduce``: 13 % less time for 32 rules); a
    rule with no output reaches the ``false`` after the comma. An error is caught and
    becomes ``e`` + its message, cut to fit a verdict. (``//`` would be shorter, but it
    swallows errors.) So the program emits only ``true``, ``false``, ``null`` and error
    strings: each rule is wrapped whole (its brackets are checked balanced beforehand), and
    the evaluator refuses any other output as garbage; a check per output in jq as well
    cost 17 us for 32 rules and guarded nothing the evaluator does not.

    A rule proven to yield one output or fail before any (:func:`.single.single_output`)
    has that first output without ``label``/``break``, which are most of the wrapper's
    cost: it is mapped as it comes (``exact`` keeps the ``break`` for every rule; the
    tests compare both). Each rule's lines are the same either way (``$__loc__``).

    ``start``/``stop`` leave out the rules of ``indices`` outside ``[start, stop)``: what
    an evaluator runs to go on after a rule that faulted (or for one rule alone). Each rule
    left out keeps its lines, empty, so every rule still stands on the lines it has in the
    whole program. The whole program never tests where to start, rule by rule: that test
    took 17 us of jq's time for 32 rules, on every delivery, for what only a resumption
    needs.

    ``sweep`` builds the program a sweep runs (:func:`.sweep.sweep_match`): every rule under one
    alarm, emitting only what decides something. A truthy first output becomes the rule's
    index (the number), a falsy one or none nothing at all, an error ``[index, "e" +
    message]``; so a delivery that matches nothing costs one output, not one per rule (and
    none of the per-rule Python between them). Each rule keeps its lines.
    """
    error = json.dumps(wire.JQ_ERROR)
    cut = wire.JQ_VERDICT_MAX - len(wire.JQ_ERROR)
    verdict = "if . then true else . end"
    chunks = []
    present = False
    for k, i in enumerate(indices):
        if sweep:
            verdict = f"if . then {i} else empty end"
        # newlines (twice: a comment's backslash continuation eats one) keep a trailing
        # comment from swallowing the wrapper; brackets are checked balanced beforehand
        if not exact and single_output(exprs[i]):
            body = f"(($__e | (\n{exprs[i]}\n\n)) | ({verdict}))"
        else:  # no output: false, or in a sweep nothing (no match)
            body = (
                f"(label $__l | (($__e | (\n{exprs[i]}\n\n)) | "
                f"(({verdict}), break $__l)){'' if sweep else ', false'})"
            )
        message = f"({error} + (tostring | .[:{cut}]))"
        part = f"(try {body} catch {f'[{i}, {message}]' if sweep else message})"
        newline = "\n" if k else ""
        if i < start or (stop is not None and i >= stop):
            chunks.append(newline + "\n" * part.count("\n"))
        else:
            chunks.append(newline + ("," if present else "") + part)
            present = True
    body = "".join(chunks) if present else "empty"
    # $__s (the start) is no longer read by the wrapper; it stays bound so a rule that
    # names it compiles, and reads, as it did
    return f"{PRELUDE}.[0] as $__s | .[1] as $__e | ({body})"


def compile_program(program: str, params: dict[str, Any]) -> Any:
    """``program`` compiled by libjq, with ``$params`` bound."""
    return jq.compile(program, args={"params": params})
