"""The rest of the contract: a subject extractor, a routing stage, an LLM provider, an MCP
tool, a CLI command, an HTTP route and a sink rung at commit. Each is small and harmless
where it is installed."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from switchboard.plugin import (
    CommitNotify,
    RoutingConfig,
    RoutingContext,
    RuleValidationError,
    Runtime,
    StageResult,
    ToolContext,
)


class AcmeSubjects:
    """The subject of an Acme delivery is its ticket: ``acme:<id>``."""

    name = "acme"

    def subject(self, source: str, kind: str | None, payload: Any) -> str | None:
        if source != "acme" or not isinstance(payload, dict):
            return None
        ticket = payload.get("id")
        return f"acme:{ticket}" if isinstance(ticket, str) and ticket else None


class AcmeBell:
    """``NOTIFY <channel>, '<endpoint_id>:<queue>'`` for new todos, sent by PostgreSQL from
    the transaction that creates them (the host counts them in
    ``switchboard_sink_rings_total{sink="acme-bell"}``); ``rung`` adds them up here too."""

    name = "acme-bell"

    def __init__(self, channel: str) -> None:
        self.rung = 0
        self.at_commit = CommitNotify(channel, rung=self._rang)

    def _rang(self, notifications: int) -> None:
        self.rung += notifications


class HelloStage:
    """A routing stage that never decides: it counts deliveries and checks ``params.hello``.

    It runs only where ``routing.stages`` lists ``"hello"``; the stages after it decide.
    """

    name = "hello"

    def __init__(self) -> None:
        self.seen = 0

    async def route(self, ctx: RoutingContext) -> StageResult:
        self.seen += 1
        return StageResult()

    async def validate(self, config: RoutingConfig) -> None:
        """Its own part of a routing config: ``params.hello``, when given, is a string."""
        value = config.params.get("hello")
        if value is not None and not isinstance(value, str):
            raise RuleValidationError("invalid_params", "params.hello: must be a string")


#: A ready-made routing config owners can install.
ACME_URGENT_PACK: dict[str, Any] = {
    "rules": [
        {"id": "acme-urgent", "expr": '.acme.priority == "urgent"', "action": {"queue": "triage"}},
    ],
}


class EchoProvider:
    """A fake LLM provider: every answer is an empty JSON object."""

    name = "hello-echo"

    async def complete(
        self, model: str, system: str, prompt: str, schema: dict[str, Any], timeout: float
    ) -> str:
        return "{}"


def greeting_tool(greeting: str) -> Callable[..., Awaitable[dict[str, str]]]:
    """The ``hello`` MCP tool, greeting with this plugin's configured ``greeting``."""

    async def hello(ctx: ToolContext, name: str = "") -> dict[str, str]:
        """Greet the calling endpoint (or ``name``)."""
        return {"greeting": f"{greeting}, {name or ctx.owner}"}

    return hello


def greeting_command(greeting: str) -> Callable[[Any, Runtime], Awaitable[int]]:
    """``switchboard hello``: the greeting and the registered sources, as JSON."""

    async def run(args: Any, runtime: Runtime) -> int:
        print(json.dumps({"greeting": greeting, "sources": runtime.registries.sources.names()}))
        return 0

    return run


def add_status_route(app: Any, runtime: Runtime) -> None:
    """``GET /hello``: whether start-up ran, how many deliveries the stage saw and how many
    notifications the bell was told of."""
    from sanic.response import json as json_response

    async def status(request: Any) -> Any:
        stage = runtime.registries.stages.get("hello")
        bell = runtime.registries.sinks.get("acme-bell")
        return json_response(
            {
                "state": runtime.state.get("hello"),
                "stage_seen": stage.seen if isinstance(stage, HelloStage) else None,
                "bells_rung": bell.rung if isinstance(bell, AcmeBell) else None,
            }
        )

    app.add_route(status, "/hello", methods=["GET"], name="hello_status")
