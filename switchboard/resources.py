"""Locate the JSON Schemas and SQL migrations shipped with the package."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

_PACKAGE = Path(__file__).resolve().parent


def _data_dir(installed: str, checkout: str) -> Path:
    # A wheel maps schemas/ and migrations/ into the package; an editable install of a
    # checkout cannot map sub-packages, so fall back to the top-level folders there.
    for candidate in (_PACKAGE / installed, _PACKAGE.parent / checkout):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"switchboard data folder {checkout!r} is missing from the install")


def schemas_dir() -> Path:
    return _data_dir("_schemas", "schemas")


def migrations_dir() -> Path:
    return _data_dir("_migrations", "migrations")


@cache
def load_schema(name: str) -> dict[str, Any]:
    """Load ``schemas/<name>.schema.json``."""
    path = schemas_dir() / f"{name}.schema.json"
    doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return doc


@cache
def schema_store() -> dict[str, dict[str, Any]]:
    """Every shipped schema keyed by its ``$id`` (for ``$ref`` resolution)."""
    store = {}
    for path in sorted(schemas_dir().glob("*.schema.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        store[doc["$id"]] = doc
    return store
