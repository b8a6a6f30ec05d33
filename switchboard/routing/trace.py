"""Validate routing traces against ``schemas/trace.schema.json``."""

from __future__ import annotations

from collections import OrderedDict
from functools import cache
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from switchboard.jsontext import sorted_key
from switchboard.resources import load_schema, schema_store

#: The trace's common fields (schemas/trace.schema.json); any other top-level key is a
#: stage's own detail, under that stage's name (``llm``'s is in the schema, but only the
#: llm stage may write it).
COMMON_KEYS = frozenset(load_schema("trace")["properties"]) - {"llm"}


@cache
def registry() -> Registry[Any]:
    """A referencing registry of every shipped schema, keyed by ``$id``."""
    resources = [(uri, Resource.from_contents(doc)) for uri, doc in schema_store().items()]
    return Registry().with_resources(resources)


@cache
def validator(name: str) -> Draft202012Validator:
    """A cached validator for ``schemas/<name>.schema.json`` that resolves ``$ref`` by ``$id``."""
    schema = load_schema(name)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, registry=registry())


#: Traces already proven valid, by canonical JSON. Deliveries of one webhook produce a
#: handful of distinct traces, so the hot path validates each shape once, not per event.
_VALID: OrderedDict[str, None] = OrderedDict()
_VALID_MAX = 4096


def validate_trace(doc: Any) -> None:
    """Raise ``ValueError`` naming the first problem when ``doc`` is not a valid trace."""
    key = sorted_key(doc)
    if key is not None and key in _VALID:
        _VALID.move_to_end(key)
        return
    error = next(iter(sorted(validator("trace").iter_errors(doc), key=_depth)), None)
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
        raise ValueError(f"invalid routing trace at {where}: {error.message}")
    if key is not None:
        _VALID[key] = None
        if len(_VALID) > _VALID_MAX:
            _VALID.popitem(last=False)


@cache
def _fault_validator(kind: int) -> Draft202012Validator:
    """The trace schema's fault branch: 0 a rule's (or the sandbox's), 1 a whole stage's."""
    ref = f"{load_schema('trace')['$id']}#/$defs/fault/oneOf/{kind}"
    return Draft202012Validator({"$ref": ref}, registry=registry())


def validate_fault(doc: Any) -> None:
    """Raise ``ValueError`` naming the first problem when ``doc`` (a ``Fault.to_json()``)
    is not a fault the trace schema takes; checked against the branch its shape claims
    (``stage`` set: a stage's), so the message names the field, not "any of oneOf"."""
    kind = 1 if isinstance(doc, dict) and "stage" in doc else 0
    error = next(iter(sorted(_fault_validator(kind).iter_errors(doc), key=_depth)), None)
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
        raise ValueError(f"invalid fault at {where}: {error.message}")


def _depth(error: Any) -> int:
    return len(error.absolute_path)
