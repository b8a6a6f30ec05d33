"""What lint finds in a routing config, from counts over real traffic and its own text (pure)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from ..routing.model import RoutingConfig

#: ``lint_webhook_rules``' finding kinds.
NEVER_MATCHED = "never_matched"
ONLY_FAULTS = "only_faults"
SHADOWED = "shadowed"
UNUSED_PARAM = "unused_param"
KINDS = (NEVER_MATCHED, ONLY_FAULTS, SHADOWED, UNUSED_PARAM)

# ``$params.name``, ``$params."name"`` and ``$params["name"]`` read one param; ``$params`` in
# any other position (``$params | keys``, ``$params[$k]``) may read any of them.
_READ = re.compile(
    r'\$params\s*(?:\.\s*([A-Za-z_][A-Za-z0-9_]*)|\.\s*"((?:[^"\\]|\\.)*)"'
    r'|\[\s*"((?:[^"\\]|\\.)*)"\s*\])'
)
_ANY = re.compile(r"\$params\b")


def params_read(exprs: Sequence[str]) -> set[str] | None:
    """The param names the expressions read, or None when one reads ``$params`` as a whole."""
    names: set[str] = set()
    for expr in exprs:
        spans = [(m.start(), m.end()) for m in _READ.finditer(expr)]
        names.update(next(g for g in m.groups() if g is not None) for m in _READ.finditer(expr))
        for whole in _ANY.finditer(expr):
            if not any(a == whole.start() for a, _ in spans):
                return None
    return names


def _label(rule: dict[str, Any], index: int) -> str:
    name = f" ({rule['name']})" if rule.get("name") else ""
    return f"rule {index} {rule.get('id')}{name}"


def lint_findings(
    config: RoutingConfig,
    evaluated: int,
    matched: Sequence[int],
    faulted: Sequence[int],
    won: Sequence[int],
    shadows: Sequence[Counter[int]],
) -> list[dict[str, Any]]:
    """``[{rule_id, kind, detail}]`` in rule order, unused params last (``rule_id`` None).

    ``matched[i]``/``faulted[i]``: events on which rule i matched/faulted; ``won[i]``: on which
    it was the first match; ``shadows[i][j]``: on which rule j matched first while i matched.
    """
    out: list[dict[str, Any]] = []
    rules = config.rules
    for i, rule in enumerate(rules if evaluated else ()):
        where = {"rule_id": rule.get("id"), "index": i}
        if faulted[i] == evaluated:
            out.append(
                {
                    **where,
                    "kind": ONLY_FAULTS,
                    "detail": f"{_label(rule, i)} faulted on every one of the {evaluated}"
                    " events evaluated: it never decides anything",
                }
            )
        elif matched[i] == 0:
            faults = f" (it faulted on {faulted[i]})" if faulted[i] else ""
            out.append(
                {
                    **where,
                    "kind": NEVER_MATCHED,
                    "detail": f"{_label(rule, i)} matched none of the {evaluated} events"
                    f" evaluated{faults}",
                }
            )
        elif won[i] == 0:
            j, times = shadows[i].most_common(1)[0]
            out.append(
                {
                    **where,
                    "kind": SHADOWED,
                    "shadowed_by": rules[j].get("id"),
                    "detail": f"{_label(rule, i)} matched {matched[i]} events, and an"
                    f" earlier rule matched each of them first ({_label(rules[j], j)}"
                    f" on {times}): it never decided one",
                }
            )
    read = params_read([r["expr"] for r in rules])
    if read is not None:
        for key in config.params:
            if key not in read:
                out.append(
                    {
                        "rule_id": None,
                        "kind": UNUSED_PARAM,
                        "param": key,
                        "detail": f"param {key!r} is read by no rule"
                        f" (no $params.{key} in any expression)",
                    }
                )
    return out
