"""Fixtures for the source tests: the recorded producer deliveries in tests/fixtures/."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from switchboard.sources import Delivery, Headers

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
#: The secret the recorded fixtures were signed with (tests/fixtures/README.md).
FIXTURE_SECRET = b"fixture-signing-secret-9f3c2a7e51d04b68"


@dataclass(frozen=True)
class Recorded:
    """A recorded delivery: its exact body bytes, its headers and the secret it was signed with."""

    body: bytes
    headers: dict[str, str]
    secret: bytes = FIXTURE_SECRET

    def delivery(self) -> Delivery:
        return Delivery(Headers(self.headers), self.body, self.headers.get("Content-Type"))


def _load(name: str) -> Recorded:
    body = (FIXTURES / f"{name}.json").read_bytes()
    headers = json.loads((FIXTURES / f"{name}.headers.json").read_text(encoding="utf-8"))
    return Recorded(body, headers)


@pytest.fixture
def recorded() -> Callable[[str], Recorded]:
    """Load a recorded delivery by fixture name (``github_issues_opened``)."""
    return _load
