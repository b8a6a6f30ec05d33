"""A third party's hook or sink that never returns holds neither the start nor the stop
for ever: each is given a deadline, then named (a start fails, a stop goes on)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pluggy
import pytest

from switchboard import hookspecs
from switchboard import runtime as runtime_module
from switchboard.config import load_config
from switchboard.errors import PluginError
from switchboard.plugin import hookimpl
from switchboard.runtime import Runtime
from switchboard.service import sinkrun
from switchboard.service.sinkrun import drain_sinks


class _Hangs:
    """A plugin whose start-up and shut-down never end."""

    @hookimpl
    def switchboard_startup(self, runtime: Runtime, app: Runtime) -> object:
        return asyncio.Event().wait()

    @hookimpl
    def switchboard_shutdown(self, runtime: Runtime, app: Runtime) -> object:
        return asyncio.Event().wait()


def _runtime(tmp_path: Path) -> Runtime:
    pm = pluggy.PluginManager("switchboard")
    pm.add_hookspecs(hookspecs)
    pm.register(_Hangs(), name="hangs")
    config = tmp_path / "switchboard.toml"
    config.write_text("[routing]\nstages = []\n")  # no stage: only the plugin above
    return Runtime(load_config(str(config), env={"SWITCHBOARD_DATA_DIR": str(tmp_path)}), pm=pm)


async def test_a_start_up_hook_that_never_ends_fails_the_start_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runtime_module, "PLUGIN_START_S", 0.2)
    with pytest.raises(PluginError, match=r"^plugin 'hangs' did not start within 0\.2 s$"):
        await asyncio.wait_for(_runtime(tmp_path).startup(), 5)


async def test_a_shut_down_hook_that_never_ends_is_left_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(runtime_module, "PLUGIN_STOP_S", 0.2)
    with caplog.at_level(logging.WARNING, logger="switchboard"):
        await asyncio.wait_for(_runtime(tmp_path).shutdown(), 5)
    assert "plugin 'hangs' did not shut down within 0.2 s: left as it was" in caplog.messages


async def test_a_sink_call_that_never_ends_is_cut_at_the_grace(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hung = asyncio.get_running_loop().create_task(asyncio.Event().wait())
    sinkrun._background.add(hung)
    try:
        with caplog.at_level(logging.WARNING, logger="switchboard.ingest"):
            await asyncio.wait_for(drain_sinks(0.2), 5)
    finally:
        sinkrun._background.discard(hung)
    assert hung.cancelled()
    assert "shutdown: 1 sink call(s) still running after 0.2 s were cut short" in caplog.messages
