"""What a tool call's arguments must be before it runs: the JSON its published input schema names.

The SDK turns arguments into Python values with pydantic in lax mode, which converts
instead of refusing: ``"no"`` and ``0`` pass as ``false``, ``"2"`` and ``true`` as an
integer, and a string holding JSON text is parsed first (``"[1]"`` as a list, ``"null"``
as null). An agent's slip would then run, and ``plan: "no"`` applies a reroute. So every
call is checked against the tool's input schema (JSON Schema's meaning: ``5.0`` is an
integer, a boolean is never a number), refused in the words the rest of Switchboard uses
for schema errors, and only then handed to pydantic, with the values as they came.
"""

from __future__ import annotations

import copy
from typing import Any

from jsonschema import Draft202012Validator
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata

from switchboard.contract import first_schema_problem

__all__ = ["ArgumentCheck", "as_given", "unknown_arguments"]

_NULL = {"type": "null"}


class _AsGiven(FuncMetadata):
    """The SDK's argument metadata, minus its parsing of JSON text found in strings."""

    def pre_parse_json(self, data: dict[str, Any]) -> dict[str, Any]:
        # A string is a string: the schema check has already refused a string where the
        # schema names a list or an object, and a string the schema allows stays one.
        return dict(data)


def as_given(meta: FuncMetadata) -> FuncMetadata:
    """``meta`` validating the arguments as they came (no JSON text parsed out of strings)."""
    return _AsGiven(
        arg_model=meta.arg_model,
        output_schema=meta.output_schema,
        output_model=meta.output_model,
        wrap_output=meta.wrap_output,
    )


def unknown_arguments(sdk_tool: Tool, arguments: dict[str, Any]) -> str | None:
    """Why ``arguments`` are refused for naming what the tool does not take (None: they don't).

    The SDK's argument model ignores extra keys, so an agent's typo (or a key it believes
    exists) would answer ok and be dropped without a word.
    """
    known = sdk_tool.parameters.get("properties") or {}
    unknown = sorted(k for k in arguments if k not in known)
    if not unknown:
        return None
    takes = ", ".join(sorted(known)) or "no arguments"
    noun = "argument" if len(unknown) == 1 else "arguments"
    return f"unknown {noun} {', '.join(map(repr, unknown))}; {sdk_tool.name} takes: {takes}"


class ArgumentCheck:
    """One tool's input schema, held to JSON's types: what a call's arguments fail, if anything."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self._schema = Draft202012Validator(schema)
        told, self._nullable = _without_null(schema)
        self._told = Draft202012Validator(told)

    def problem(self, arguments: dict[str, Any]) -> str | None:
        """``"<argument>: <what it must be>"`` for the first argument that fails, or None."""
        if self._schema.is_valid(arguments):
            return None
        # Told against the schema without its null branches, an optional integer given a
        # string "must be an integer", not "matches none of the allowed forms: …; or null".
        given = {k: v for k, v in arguments.items() if v is not None or k not in self._nullable}
        found = first_schema_problem(self._told.iter_errors(given))
        if found is None:
            found = first_schema_problem(self._schema.iter_errors(arguments))
        if found is None:  # pragma: no cover - is_valid said there is one
            return "arguments: do not match the tool's input schema"
        return f"{found.where() if found.path else 'arguments'}: {found.problem}"


def _without_null(schema: dict[str, Any]) -> tuple[dict[str, Any], frozenset[str]]:
    """``schema`` with each optional argument's ``anyOf [..., null]`` narrowed to the rest,
    and the names of those arguments (null stays allowed for them: it means "left out")."""
    told = copy.deepcopy(schema)
    nullable = set()
    for name, prop in (told.get("properties") or {}).items():
        branches = prop.get("anyOf") if isinstance(prop, dict) else None
        if not isinstance(branches, list) or _NULL not in branches:
            continue
        rest = [b for b in branches if b != _NULL]
        if not rest:
            continue
        nullable.add(name)
        del prop["anyOf"]
        if len(rest) == 1 and isinstance(rest[0], dict):
            prop.update(rest[0])
        else:
            prop["anyOf"] = rest
    return told, frozenset(nullable)
