"""Shared fixtures for the routing tests."""

from __future__ import annotations

import pytest

from switchboard.routing.model import Grant, Target


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def grant() -> Grant:
    return Grant(
        target_queue="inbox",
        queues=("inbox", "forge", "lane-s"),
        targets=(Target("ep-owner", ("inbox",)), Target("ep-a", ("forge",)), Target("ep-b", ())),
    )
