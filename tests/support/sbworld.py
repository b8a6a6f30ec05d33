"""Builds a small world (humans, endpoints, webhooks) through the real CLI."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sbtest import CLI


@dataclass
class World:
    cli: CLI
    endpoints: dict[str, dict[str, Any]] = field(default_factory=dict)

    def human(self, name: str) -> None:
        self.cli.json("human", "add", name)

    def endpoint(self, owner: str, name: str, *, queues: str = "inbox",
                 webhook_queues: str = "inbox", sources: str = "cairn,gitea,github,generic",
                 webhook_max: int = 5) -> dict[str, Any]:
        ep = self.cli.json(
            "endpoint", "vend", "--owner", owner, "--name", name, "--queues", queues,
            "--webhook-queues", webhook_queues, "--source-types", sources,
            "--webhook-max", str(webhook_max),
        )
        self.endpoints[name] = ep
        return ep

    def webhook(self, endpoint: str, source: str, queue: str = "inbox") -> dict[str, Any]:
        return dict(self.cli.json(
            "webhook", "create", "--endpoint", self.endpoints[endpoint]["endpoint_id"],
            "--source", source, "--target-queue", queue,
        ))

    def route(self, webhook_id: str, endpoint: str) -> None:
        self.cli.json("webhook", "route", "add", webhook_id, self.endpoints[endpoint]["endpoint_id"])
