"""Turn a JSON Schema validation error into the user's terms: the deepest failing field, what was expected.

jsonschema's own messages quote the whole instance (a Python dict) and, for ``oneOf`` and
``anyOf``, say only "is not valid under any of the given schemas". Every place that checks
user input against a schema (config, routing rules, source configs, plugin settings) goes
through :func:`schema_problem` instead, so one field is named the same way everywhere.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from jsonschema.exceptions import ValidationError

__all__ = ["SchemaProblem", "Wording", "first_schema_problem", "schema_path", "schema_problem"]

_TYPE_WORDS = {
    "object": "an object",
    "array": "a list",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "null": "null",
}


@dataclass(frozen=True)
class Wording:
    """How problems are told. The default is JSON's words (tool arguments, routing rules);
    a config file has its own (TOML's type names, no null, what was given)."""

    types: Mapping[str, str] = field(default_factory=lambda: dict(_TYPE_WORDS))
    #: offer null among the choices (a TOML file cannot write it)
    null: bool = True
    #: a pattern's meaning in words ("an http:// or https:// URL"), by the pattern
    patterns: Mapping[str, str] = field(default_factory=dict)
    #: the value given, told for the problem at a path ("0", '"example.com"'), or None to
    #: say nothing; None here: only a type error says what was given, as its JSON type
    given: Callable[[tuple[str | int, ...], Any], str | None] | None = None


JSON_WORDING = Wording()


@dataclass(frozen=True)
class SchemaProblem:
    """One failing field: its absolute ``path`` and the ``problem`` ("must be a boolean")."""

    path: tuple[str | int, ...]
    problem: str
    #: True for a key the schema does not allow (callers word it "unknown key"/"unknown field").
    unknown: bool = False
    #: the failing value, for a wording that tells what was given (never in ``problem``)
    value: Any = field(default=None, compare=False, repr=False)
    has_value: bool = field(default=False, compare=False, repr=False)
    #: the JSON Schema keyword that failed ("type", "minimum", …)
    keyword: str = field(default="", compare=False, repr=False)

    def where(self, root: str = "") -> str:
        """``root`` plus the path, ``a.b[0].c`` style (``root`` or "(root)" when empty)."""
        return schema_path(self.path, root)


def schema_path(path: Iterable[str | int], root: str = "") -> str:
    """``root.key[0].key``: list indexes in brackets, as a user writes them in TOML or JSON."""
    out = root
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(root)"


def first_schema_problem(
    errors: Iterable[ValidationError], wording: Wording = JSON_WORDING
) -> SchemaProblem | None:
    """The problem of the shallowest error (ties broken by path text), or None."""
    ordered = sorted(
        errors, key=lambda e: (len(e.absolute_path), [str(p) for p in e.absolute_path])
    )
    return schema_problem(ordered[0], wording) if ordered else None


def schema_problem(error: ValidationError, wording: Wording = JSON_WORDING) -> SchemaProblem:
    """``error`` told as the deepest failing field and what it expected (and, when
    ``wording`` tells what was given, that too, once, at the end)."""
    problem = _problem(error, wording)
    if wording.given is None or not problem.has_value:
        return problem
    given = wording.given(problem.path, problem.value)
    if given is None and problem.keyword == "type":  # a table where a string goes, say
        given = _got(problem.value, wording)
    return replace(problem, problem=f"{problem.problem} (got {given})") if given else problem


def _problem(error: ValidationError, wording: Wording) -> SchemaProblem:
    if error.validator in ("oneOf", "anyOf"):
        return _alternatives(error, wording)
    path = tuple(error.absolute_path)
    if error.validator == "required":
        missing = _missing(error)
        return SchemaProblem((*path, missing) if missing else path, "is required")
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = error.schema.get("properties", {}) if isinstance(error.schema, dict) else {}
        extra = sorted(str(k) for k in set(error.instance) - set(allowed))
        return SchemaProblem((*path, extra[0]) if extra else path, "unknown key", unknown=True)
    return SchemaProblem(
        path,
        _expected(error, wording),
        value=error.instance,
        has_value=True,
        keyword=str(error.validator),
    )


def _missing(error: ValidationError) -> str | None:
    if not isinstance(error.instance, dict):
        return None
    required = error.validator_value if isinstance(error.validator_value, list) else []
    absent = [str(k) for k in required if k not in error.instance]
    return absent[0] if absent else None


def _got(instance: Any, wording: Wording = JSON_WORDING) -> str:
    words = wording.types
    if isinstance(instance, bool):
        return words["boolean"]
    if isinstance(instance, int):
        return words["integer"]
    if isinstance(instance, float):
        return words["number"]
    if instance is None:
        return "null"
    for kind, py in (("string", str), ("object", dict), ("array", list)):
        if isinstance(instance, py):
            return words[kind]
    return type(instance).__name__


def _literal(value: Any) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _expected(error: ValidationError, wording: Wording) -> str:
    # Never the instance itself: it may be a whole dict, or a secret from a config file
    # (a wording that tells what was given does so at the end, knowing where it came from).
    kind, want = error.validator, error.validator_value
    if kind == "type":
        kinds = [
            k for k in (want if isinstance(want, list) else [want]) if wording.null or k != "null"
        ]
        words = " or ".join(wording.types.get(str(k), str(k)) for k in kinds)
        if wording.given is not None:
            return f"must be {words}"
        return f"must be {words} (got {_got(error.instance)})"
    if kind == "const":
        return f"must be {_literal(want)}"
    if kind == "enum":
        choices = [v for v in want if wording.null or v is not None]
        return f"must be one of {', '.join(_literal(v) for v in choices)}"
    if kind in ("minimum", "exclusiveMinimum"):
        return f"must be {'at least' if kind == 'minimum' else 'more than'} {want}"
    if kind in ("maximum", "exclusiveMaximum"):
        return f"must be {'at most' if kind == 'maximum' else 'less than'} {want}"
    if kind == "minLength":
        return "must not be empty" if want == 1 else f"must be at least {want} characters"
    if kind == "maxLength":
        return f"must be at most {want} characters"
    if kind == "minItems":
        return "must not be empty" if want == 1 else f"must have at least {want} items"
    if kind == "maxItems":
        return f"must have at most {want} items"
    if kind == "uniqueItems":
        return "must not repeat items"
    if kind == "pattern":
        meaning = wording.patterns.get(str(want))
        return f"must be {meaning}" if meaning else f"must match the pattern {want}"
    if kind == "format":
        return f"must be a valid {want}"
    if kind == "not":
        return "is not allowed here"
    return f"is not valid ({kind})"


def _alternatives(error: ValidationError, wording: Wording) -> SchemaProblem:
    branches: dict[int, list[ValidationError]] = {}
    for sub in error.context or ():
        index = sub.relative_schema_path[0] if sub.relative_schema_path else 0
        branches.setdefault(int(index), []).append(sub)
    path = tuple(error.absolute_path)
    if not branches:  # oneOf with more than one match
        return SchemaProblem(path, "matches more than one of the allowed forms")
    schemas: Sequence[Any] = (
        error.validator_value if isinstance(error.validator_value, list) else []
    )
    keys = _discriminators(schemas)
    fitting = [i for i, errs in branches.items() if not any(_rules_out(e, keys) for e in errs)]
    if len(fitting) > 1:
        fitting = _closest(fitting, branches, schemas, error.instance)
    if len(fitting) == 1:
        return _deepest(branches[fitting[0]], wording)
    # No branch fits the given type (or several fit equally): each branch's first error.
    firsts = [_deepest(branches[i], wording) for i in sorted(branches)]
    told = list(dict.fromkeys(_relative(p, len(path)) for p in firsts))
    if len(told) == 1:  # every branch says the same ("must be an object")
        return firsts[0]
    return SchemaProblem(
        path,
        f"matches none of the allowed forms: {'; or '.join(told)}",
        value=error.instance,
        has_value=True,
    )


def _relative(problem: SchemaProblem, depth: int) -> str:
    rest = problem.path[depth:]
    return f"{schema_path(rest)} {problem.problem}" if rest else problem.problem


def _discriminators(schemas: Sequence[Any]) -> set[str]:
    # A key that is a const or enum in two or more branches tells them apart (a provider's
    # "type"); a const only one branch has (a drop action's "drop: true") does not.
    counts: dict[str, int] = {}
    for schema in schemas:
        props = schema.get("properties", {}) if isinstance(schema, dict) else {}
        for key, sub in props.items():
            if isinstance(sub, dict) and ("const" in sub or "enum" in sub):
                counts[key] = counts.get(key, 0) + 1
    return {key for key, n in counts.items() if n > 1}


def _rules_out(error: ValidationError, keys: set[str]) -> bool:
    # A branch does not fit when the value is the wrong JSON type for it, when it is not the
    # branch's own const (anyOf ["auto", integer]), or when a discriminating field names
    # another branch.
    where = tuple(error.relative_path)
    if error.validator == "type":
        return not where
    if error.validator in ("const", "enum"):
        return not where or (len(where) == 1 and where[0] in keys)
    return False


def _closest(
    fitting: list[int],
    branches: dict[int, list[ValidationError]],
    schemas: Sequence[Any],
    instance: Any,
) -> list[int]:
    # Several branches fit the type: prefer the one that knows the most of the given keys,
    # then the one with the fewest errors; a tie leaves them all (each is then told).
    def score(i: int) -> tuple[int, int]:
        schema = schemas[i] if i < len(schemas) and isinstance(schemas[i], dict) else {}
        known = set(schema.get("properties", {}))
        keys = set(instance) if isinstance(instance, dict) else set()
        return (-len(keys & known), len(branches[i]))

    best = min(score(i) for i in fitting)
    return [i for i in fitting if score(i) == best]


def _deepest(errors: list[ValidationError], wording: Wording) -> SchemaProblem:
    wrong_type = [e for e in errors if e.validator == "type" and not e.relative_path]
    if wrong_type:  # the first thing to say about a value of the wrong kind
        return _problem(wrong_type[0], wording)
    ordered = sorted(
        errors,
        key=lambda e: (-len(e.absolute_path), [str(p) for p in e.absolute_path], e.validator),
    )
    return _problem(ordered[0], wording)
