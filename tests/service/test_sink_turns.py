"""The sinks' turn: the deliveries one group commit wakes ring a ``deliver_many`` sink once,
while a sink with only ``deliver`` still gets a call per event, none waiting on another's."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from sbtest import CLI, make_env
from sbworld import World

from switchboard.config import load_config
from switchboard.plugin import hookimpl
from switchboard.plugins import make_plugin_manager
from switchboard.runtime import Runtime
from switchboard.service.ingest import ingest
from switchboard.service.sinkrun import drain_sinks
from switchboard.sources import Headers


class _Together:
    """A sink that takes a turn's events at once."""

    name = "together"

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.single = 0

    async def deliver(self, rt: Any, event: Any, todos: Any) -> None:
        self.single += 1

    async def deliver_many(self, rt: Any, batch: Any) -> None:
        await asyncio.sleep(0)  # a sink that waits on something of its own
        self.calls.append([str(event["id"]) for event, todos in batch if todos])


class _Each:
    """A sink with ``deliver`` only; the first call waits until the last one has started."""

    name = "each"

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.started: list[str] = []
        self.all_started = asyncio.Event()

    async def deliver(self, rt: Any, event: Any, todos: Any) -> None:
        self.started.append(str(event["id"]))
        if len(self.started) == self.expected:
            self.all_started.set()
        await asyncio.wait_for(self.all_started.wait(), 10)


class _Failing:
    name = "failing"

    async def deliver_many(self, rt: Any, batch: Any) -> None:
        raise RuntimeError("the far end is down")

    async def deliver(self, rt: Any, event: Any, todos: Any) -> None:  # pragma: no cover
        raise AssertionError("deliver_many is there: deliver is not called")


class _Plugin:
    def __init__(self, *sinks: Any) -> None:
        self.sinks = sinks

    @hookimpl
    def switchboard_register_sinks(self, register: Any) -> None:
        for sink in self.sinks:
            register.add(sink)


def _token(dsn: str, tmp_path: Path) -> tuple[CLI, str]:
    cli = CLI(make_env(dsn, tmp_path / "data"))
    w = World(cli, direct=True)
    w.human("owner")
    w.endpoint("owner", "owner")
    hook = w.webhook("owner", "generic")
    return cli, hook["ingest_url"].rsplit("/", 1)[1]


async def _deliver_together(cli: CLI, token: str, n: int, *sinks: Any) -> None:
    """``n`` deliveries at once (one group commit wakes them in one turn), their sinks run."""
    pm = make_plugin_manager()
    pm.register(_Plugin(*sinks), name="test-sinks")
    rt = Runtime(load_config(env=cli.env), pm=pm)
    await rt.open_store(migrate=False)
    try:
        replies = await asyncio.gather(
            *(
                ingest(rt, token, Headers({"X-Delivery-Id": f"turn-{i}"}), b'{"n": %d}' % i, None)
                for i in range(n)
            )
        )
        assert all(r.status == 202 and r.body["created"] == 1 for r in replies), replies
        await drain_sinks()
    finally:
        await rt.shutdown()


def test_one_turn_rings_a_batch_sink_once_and_each_sink_per_event(dsn: str, tmp_path: Path) -> None:
    cli, token = _token(dsn, tmp_path)
    together, each = _Together(), _Each(expected=12)
    asyncio.run(_deliver_together(cli, token, 12, together, each))
    # every event reached the batch sink once, in fewer calls than events, never one by one
    ids = [i for call in together.calls for i in call]
    assert len(ids) == 12 and len(set(ids)) == 12, together.calls
    assert len(together.calls) < 12, together.calls
    assert together.single == 0
    # the per-event sink got all twelve, each while the others were still in flight (the
    # first call waited for the twelfth to start: a call per event, none queued behind another)
    assert sorted(each.started) == sorted(ids)


def test_a_failing_batch_sink_is_counted_and_the_others_still_run(dsn: str, tmp_path: Path) -> None:
    from prometheus_client import REGISTRY

    def failures() -> float:
        return (
            REGISTRY.get_sample_value("switchboard_sink_failures_total", {"sink": "failing"}) or 0
        )

    cli, token = _token(dsn, tmp_path)
    together = _Together()
    before = failures()
    asyncio.run(_deliver_together(cli, token, 5, _Failing(), together))
    assert failures() - before >= 1
    assert len([i for call in together.calls for i in call]) == 5


def test_rings_after_a_turn_started_go_to_the_next(dsn: str, tmp_path: Path) -> None:
    """A delivery that commits while a turn's sinks run is rung by a turn of its own."""
    cli, token = _token(dsn, tmp_path)
    together = _Together()

    async def two_waves() -> None:
        pm = make_plugin_manager()
        pm.register(_Plugin(together), name="test-sinks")
        rt = Runtime(load_config(env=cli.env), pm=pm)
        await rt.open_store(migrate=False)
        try:
            for wave in range(2):
                reply = await ingest(
                    rt, token, Headers({"X-Delivery-Id": f"w-{wave}"}), b"{}", None
                )
                assert reply.body["created"] == 1
                await asyncio.sleep(0)  # the first turn starts before the second ring
            await drain_sinks()
        finally:
            await rt.shutdown()

    asyncio.run(two_waves())
    assert [len(c) for c in together.calls] == [1, 1]


async def test_drain_ends_with_tasks_done_whose_callbacks_have_not_run() -> None:
    """A sink task that has finished but is still in the set (its done callback, which
    drops it, is only scheduled): draining must not wait on it again and again (under
    Python 3.12 a gather of finished tasks returns without yielding, and would spin)."""
    from switchboard.service import sinkrun

    async def quick() -> None:
        pass

    task = asyncio.get_running_loop().create_task(quick())
    await task
    sinkrun._background.add(task)  # finished, its drop never scheduled
    try:
        await asyncio.wait_for(drain_sinks(), 5)
    finally:
        sinkrun._background.discard(task)
    assert task not in sinkrun._background
