"""The webhook receiver: ``POST /webhooks/w/<token>`` (filled in by the ingest issue)."""

from __future__ import annotations

from typing import Any

from sanic import Sanic

from .runtime import Runtime


def add_receiver_routes(app: Sanic[Any, Any], rt: Runtime) -> None:
    """Register the ingest route on ``app``."""
