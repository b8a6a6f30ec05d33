"""The sink registry: sinks called after commit beside sinks rung at commit, and a plugin's
mistakes in either refused at registration, naming the plugin and the sink."""

from __future__ import annotations

from typing import Any

import pytest

from switchboard.plugin import CommitNotify, PluginError, SinkRegistry


class Called:
    name = "called"

    async def deliver(self, runtime: Any, event: Any, todos: Any) -> None:
        pass


class Bell:
    def __init__(self, at_commit: Any, name: str = "bell") -> None:
        self.name = name
        self.at_commit = at_commit


def registry() -> SinkRegistry:
    reg = SinkRegistry()
    reg.current_plugin = "acme-bells"
    return reg


def test_commit_sinks_are_rung_and_the_others_called() -> None:
    reg = registry()
    counted = CommitNotify("acme_ready", rung=print)
    reg.add(Called())
    reg.add(Bell(counted))
    assert reg.names() == ["called", "bell"]
    assert [s.name for s in reg.called()] == ["called"]
    assert reg.notifies() == (("bell", "acme-bells", counted),)


@pytest.mark.parametrize(
    ("at_commit", "says"),
    [
        ("acme_ready", "at_commit must be a CommitNotify, not str"),
        (CommitNotify(""), "the channel must be a non-empty string"),
        (CommitNotify("x" * 64), "is not a PostgreSQL channel name (at most 63 bytes, no NUL)"),
        (CommitNotify("é" * 32), "at most 63 bytes"),  # 64 bytes in UTF-8
        (CommitNotify("a\x00b"), "no NUL"),
        (CommitNotify("acme_ready", rung="count"), "rung must be callable"),  # type: ignore[arg-type]
    ],
)
def test_a_bad_at_commit_is_refused_naming_the_plugin_and_sink(at_commit: Any, says: str) -> None:
    reg = registry()
    with pytest.raises(PluginError) as err:
        reg.add(Bell(at_commit))
    assert str(err.value).startswith("plugin 'acme-bells': sink 'bell': at_commit")
    assert says in str(err.value)
    assert reg.names() == [] and reg.notifies() == ()


def test_the_longest_channel_name_is_taken() -> None:
    reg = registry()
    reg.add(Bell(CommitNotify("x" * 63)))
    assert reg.notifies()[0][2].channel == "x" * 63


def test_a_sink_that_neither_delivers_nor_rings_is_refused() -> None:
    class Idle:
        name = "idle"

    with pytest.raises(PluginError, match="plugin 'acme-bells': sink 'idle' has neither"):
        registry().add(Idle())  # type: ignore[arg-type]


def test_two_sinks_of_one_name_are_refused_as_before() -> None:
    reg = registry()
    reg.add(Bell(CommitNotify("a")))
    with pytest.raises(PluginError, match="registered twice"):
        reg.add(Bell(CommitNotify("b")))
    assert [n.channel for _, _, n in reg.notifies()] == ["a"]
