"""A routing stage checked once, when it registers: its names, its budget and its trace schema."""

from __future__ import annotations

import re
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from .model import STAGE_DEFAULT, STAGE_PENDING, STAGE_RULE
from .trace import COMMON_KEYS

#: A stage's name as the trace schema takes it (``stage``, fault ``stage``, its own key).
NAME_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,63}")
#: Names no stage may take: what the trace says when no stage decided, and its common keys
#: (a stage's own detail goes under its name, so a stage named ``action`` would clash).
RESERVED = frozenset({STAGE_DEFAULT, STAGE_PENDING}) | COMMON_KEYS
#: The largest budget a stage's own ``timeout_ms`` earns (ms): the llm stage's longest model
#: call (120 s, plus its 5 s margin) fits; past it a delivery would wait on one stage for
#: minutes. ``[routing] stage_timeout_ms``, the operator's own, is not capped by it.
MAX_OWN_TIMEOUT_MS = 150_000


def stage_problem(stage: Any, name: str) -> str | None:
    """What stops the stage registered as ``name`` from running, or None."""
    problem = _name_problem("name", name)
    if problem is not None:
        return problem
    if name == STAGE_RULE:
        return f"name {name!r} is what the rules stage writes in the trace"
    trace_name = getattr(stage, "trace_name", None)
    if trace_name is not None:
        if not isinstance(trace_name, str):
            return f"trace_name must be a string, not {type(trace_name).__name__}"
        problem = _name_problem("trace_name", trace_name)
        if problem is not None:
            return problem
    own = getattr(stage, "timeout_ms", None)
    if own is not None and (isinstance(own, bool) or not isinstance(own, int) or own <= 0):
        return f"timeout_ms must be a positive integer (milliseconds), not {own!r}"
    schema = getattr(stage, "trace_schema", None)
    if schema is not None:
        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as exc:
            return f"trace_schema is not a JSON Schema: {exc.message}"
    return None


def _name_problem(field: str, name: str) -> str | None:
    if not NAME_PATTERN.fullmatch(name):
        return (
            f"{field} {name!r} is not a trace name (lowercase letters, digits and _, "
            "starting with a letter, at most 64)"
        )
    if name in RESERVED:
        return f"{field} {name!r} is reserved (the trace's own: {', '.join(sorted(RESERVED))})"
    return None
