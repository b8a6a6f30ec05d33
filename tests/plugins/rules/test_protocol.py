"""The sandbox protocol: each message's wire form, its round trip, and what is refused."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from switchboard_rules import pool
from switchboard_rules import protocol as wire

#: Every report line, as the module docstring documents it.
REPORTS: list[tuple[wire.Report, str]] = [
    (wire.Pid(4242), "p 4242\n"),
    (wire.CompileError(3, "syntax error"), 'c 3 "syntax error"\n'),
    (wire.Armed(0, wire.RULE_LIMIT), "a 0 t\n"),
    (wire.Armed(7, wire.BUDGET_LIMIT), "a 7 b\n"),
    (wire.Matched(2), "r 2 m\n"),
    (wire.NoMatch(2), "r 2 n\n"),
    (wire.RuleError(1, "boom"), 'r 1 e "boom"\n'),
    (wire.BudgetSpent(5), "b 5\n"),
    (wire.Garbage("evaluation ended early"), 'g "evaluation ended early"\n'),
    (wire.DONE, "d\n"),
    (wire.Exited(-14), "x -14\n"),
    (wire.Exited(0), "x 0\n"),
]


@pytest.mark.parametrize(("message", "line"), REPORTS)
def test_report_lines_round_trip(message: wire.Report, line: str) -> None:
    assert message.encode() == line
    decoded = wire.decode(line.removesuffix("\n"))
    assert type(decoded) is type(message) and decoded == message


@pytest.mark.parametrize("text", ["multi\nline", 'quo"ted \\ back', "ünïcödé ✓", ""])
def test_messages_stay_on_one_line(text: str) -> None:
    for message in (wire.CompileError(0, text), wire.RuleError(0, text), wire.Garbage(text)):
        line = message.encode()
        assert line.count("\n") == 1 and line.endswith("\n")
        assert wire.decode(line[:-1]) == message


def test_messages_of_different_kinds_never_compare_equal() -> None:
    assert wire.Matched(1) != wire.NoMatch(1)
    assert wire.BudgetSpent(1) != wire.Matched(1)


@pytest.mark.parametrize("line", [
    "", "hello there", "p", "p x", "r 0 maybe", "r 0 e not-json", "r x m", "a 1 q", "a 1",
    "c 1 unquoted", "d now", "x", "b", "g", "z 1",
])  # fmt: skip
def test_anything_else_is_refused(line: str) -> None:
    with pytest.raises(ValueError):
        wire.decode(line)


def test_child_config_request_and_spec_round_trip() -> None:
    cfg = wire.ChildConfig(
        memory_bytes=2**27,
        rule_ms=50,
        compile_ms=1000,
        cache_size=64,
        parse_s_per_byte=2.4e-7,
        ruleset_bytes=2**24,
        budget_bytes=2**29,
        retire_bytes=2**25,
    )
    assert wire.ChildConfig.decode(cfg.encode()) == cfg
    req = wire.Request(wire.SPAWN, "k" * 64)
    assert wire.Request.decode(req.encode()) == req
    assert wire.Request.decode(wire.Request(wire.COMPILE, "k").encode()).op == "compile"
    # canonical: the same rule set is the same bytes (and so the same zygote)
    a = wire.encode_spec([".a", "true"], {"x": 1, "y": [2]})
    b = wire.encode_spec([".a", "true"], {"y": [2], "x": 1})
    assert a == b and wire.decode_spec(a) == ([".a", "true"], {"x": 1, "y": [2]})


def test_eval_frame_round_trip_over_a_socket() -> None:
    envelope = wire.encode_envelope({"kind": "push", "text": "line\nbreak ✓"})
    assert b"\n" not in envelope  # the header line is the frame's only newline
    body = wire.encode_eval(wire.EvalHeader(3, 187.5), envelope)
    mine, theirs = socket.socketpair()
    with mine, theirs:
        mine.sendall(wire.frame(b'{"exprs": [], "params": {}}') + wire.frame(body))
        assert wire.read_frame(theirs) == b'{"exprs": [], "params": {}}'
        assert wire.decode_eval(wire.read_frame(theirs)) == (wire.EvalHeader(3, 187.5), envelope)
        mine.sendall(wire.frame(b"cut short")[:6])
        mine.shutdown(socket.SHUT_WR)
        with pytest.raises(EOFError):
            wire.read_frame(theirs)


def test_progress_page() -> None:
    page = wire.progress_page()
    assert wire.armed_at_death(page) is None  # died before arming anything
    wire.pack_progress(page, 0, 4, wire.BUDGET_LIMIT.encode(), b"0")  # as the evaluator does
    assert wire.armed_at_death(page) == wire.Armed(4, wire.BUDGET_LIMIT)
    wire.finish_progress(page)
    assert wire.armed_at_death(page) is None  # it finished: nothing to blame
    page.close()


def test_trial_answers() -> None:
    assert wire.decode_trial(wire.encode_trial(None, 123456)) == (None, 123456)
    assert wire.decode_trial(wire.encode_trial("syntax error ✓")) == ("syntax error ✓", 0)
    with pytest.raises(ValueError):
        wire.decode_trial(b"K")  # a size is part of the answer
    with pytest.raises(ValueError):
        wire.decode_trial(b"")  # killed before it answered


def test_the_fork_server_starts_without_the_host_or_the_plugin_hooks() -> None:
    """The child imports its own modules and jq: never the plugin package's ``__init__``."""
    probe = pool._BOOTSTRAP.replace(".main(sys.argv[3:])", "; print(' '.join(sorted(sys.modules)))")
    package_dir = str(Path(pool.__file__).resolve().parent)
    out = subprocess.run(
        [sys.executable, "-I", "-c", probe, pool._PACKAGE, package_dir, pool._CHILD_MODULE],
        env={},
        cwd="/",
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    modules = set(out.stdout.split())
    assert {"jq", "switchboard_rules.sandbox_child", "switchboard_rules.protocol"} <= modules
    assert "switchboard_rules.child.loop" in modules  # the mechanisms behind sandbox_child
    assert not {m for m in modules if m == "switchboard" or m.startswith("switchboard.")}
    assert "switchboard_rules.stage" not in modules and "pluggy" not in modules
