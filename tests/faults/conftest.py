"""Fault fixtures: a PostgreSQL of the module's own, to freeze and restart for real."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from typing import Any

import pytest
from sbfaults import PrivatePostgres

_counter = itertools.count()


@pytest.fixture(scope="module")
def private_pg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivatePostgres]:
    """An embedded PostgreSQL only this module uses (the session's is shared: never frozen)."""
    server = PrivatePostgres(tmp_path_factory.mktemp("private-pg"))
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def private_dsn(private_pg: PrivatePostgres) -> str:
    """A fresh, migrated database on the module's private server."""
    return private_pg.migrated_database(f"sb_fault{os.getpid()}_{next(_counter)}")


@pytest.fixture
def fault_config(tmp_path: Any) -> Any:
    """``make(toml_text)``: a config file for the server under test."""

    def make(text: str) -> Any:
        path = tmp_path / "switchboard.toml"
        path.write_text(text)
        return path

    return make
