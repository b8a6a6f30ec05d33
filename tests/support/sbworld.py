"""Builds a small world (humans, endpoints, webhooks) through the real CLI's commands."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from sbtest import CLI, remember_secrets

T = TypeVar("T")


@dataclass
class World:
    """A test's humans and endpoints, named by their short names.

    ``prefix`` is put in front of every human and endpoint name it creates, so tests sharing
    one server and database each build their own tenant (``World(cli, prefix="t3-")``);
    ``name("alice")`` is the real name. With ``direct``, humans and endpoints are made
    in-process through the service the CLI calls; webhooks, routes and friendships always
    go through the CLI's commands. Those run in this process (:meth:`CLI.fast`: the same
    parser, runtime and service calls, without the half second a child's start-up costs;
    tests/cli runs each verb through the console script itself), unless the environment
    puts plugins of its own on ``PYTHONPATH``, which only a child would load, or names no
    database (the embedded one a serve started, which a process keeps one handle on).
    """

    cli: CLI
    endpoints: dict[str, dict[str, Any]] = field(default_factory=dict)
    prefix: str = ""
    direct: bool = False

    def _commands(self) -> CLI:
        env = self.cli.env
        if env.get("PYTHONPATH") != os.environ.get("PYTHONPATH"):
            return self.cli  # a plugin only a child sees
        if "SWITCHBOARD_DATABASE_URL" not in env:
            # the embedded database of a serve: a command in this process would keep its
            # own handle on it (the embedded server's, one per data directory a process)
            return self.cli
        return self.cli.fast()

    def name(self, short: str) -> str:
        return self.prefix + short

    def endpoint_ids(self) -> list[str]:
        """The ids of every endpoint this world made (to scope queries to this tenant)."""
        return [str(ep["endpoint_id"]) for ep in self.endpoints.values()]

    def human(self, name: str) -> None:
        if self.direct:
            from switchboard.service import identity

            self._service(lambda rt: identity.add_human(rt, self.name(name)))
        else:
            self._commands().json("human", "add", self.name(name))

    def endpoint(
        self,
        owner: str,
        name: str,
        *,
        queues: str = "inbox",
        webhook_queues: str = "inbox",
        sources: str = "cairn,gitea,github,generic",
        webhook_max: int = 5,
    ) -> dict[str, Any]:
        if self.direct:
            from switchboard.service import identity

            ep = dict(
                self._service(
                    lambda rt: identity.vend_endpoint(
                        rt,
                        owner=self.name(owner),
                        name=self.name(name),
                        queues=_csv(queues),
                        webhook_queues=_csv(webhook_queues),
                        source_types=_csv(sources),
                        webhook_max=webhook_max,
                    )
                )
            )
            ep["endpoint_id"] = str(ep["endpoint_id"])
            remember_secrets(ep)
        else:
            ep = self._commands().json(
                "endpoint",
                "vend",
                "--owner",
                self.name(owner),
                "--name",
                self.name(name),
                "--queues",
                queues,
                "--webhook-queues",
                webhook_queues,
                "--source-types",
                sources,
                "--webhook-max",
                str(webhook_max),
            )
        self.endpoints[name] = ep
        return ep

    def friend(self, from_human: str, to_human: str, state: str = "approved") -> None:
        self._commands().json(
            "friend", "add", self.name(from_human), self.name(to_human), "--state", state
        )

    def webhook(self, endpoint: str, source: str, queue: str = "inbox") -> dict[str, Any]:
        return dict(
            self._commands().json(
                "webhook",
                "create",
                "--endpoint",
                self.endpoints[endpoint]["endpoint_id"],
                "--source",
                source,
                "--target-queue",
                queue,
            )
        )

    def route(self, webhook_id: str, endpoint: str) -> None:
        self._commands().json(
            "webhook", "route", "add", webhook_id, self.endpoints[endpoint]["endpoint_id"]
        )

    def _service(self, call: Callable[[Any], Awaitable[T]]) -> T:
        """Run ``call(runtime)`` on a runtime built from the CLI's environment."""
        return on_runtime(self.cli.env, call)


def on_runtime(env: dict[str, str], call: Callable[[Any], Awaitable[T]]) -> T:
    """``call(runtime)`` on an in-process runtime of ``env``'s database.

    On its own thread and loop, so it works from sync and async tests alike.
    """
    from switchboard.config import load_config
    from switchboard.runtime import Runtime

    async def run() -> T:
        rt = Runtime(load_config(env=env))
        await rt.open_store(migrate=False)
        try:
            return await call(rt)
        finally:
            await rt.shutdown()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, run()).result()


#: The recorded producer payloads (tests/fixtures/README.md).
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def fixture_body(name: str, change: Callable[[Any], None]) -> bytes:
    """The fixture ``name``.json, changed in place by ``change``, as a body to deliver."""
    doc = json.loads((FIXTURES / f"{name}.json").read_bytes())
    change(doc)
    return json.dumps(doc).encode()


async def vended_endpoint(
    rt: Any, owner: str, name: str, queues: list[str], **grant: Any
) -> dict[str, Any]:
    """Vend ``name`` for ``owner`` in process (``grant``: ``vend_endpoint``'s other
    arguments, ``webhook_queues=...`` say) and return it as its token authenticates."""
    from switchboard.service import identity

    made = await identity.vend_endpoint(rt, owner=owner, name=name, queues=queues, **grant)
    return dict(await identity.authenticate(rt, made["token"]))


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]
