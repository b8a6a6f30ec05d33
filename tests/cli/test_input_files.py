"""What a command does with a file it cannot use (not UTF-8) and with a reader that goes away:
one line naming the flag and exit 2; exit 141 and no traceback."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sbtest import CLI, SWITCHBOARD
from sbworld import vended_endpoint

from switchboard.runtime import Runtime
from switchboard.service import identity, webhooks


async def _generic_hook(runtime: Runtime) -> tuple[Any, str]:
    """Alice's owner endpoint and its generic webhook, for verbs that read files about them."""
    await identity.add_human(runtime, "alice")
    owner = await vended_endpoint(
        runtime,
        "alice",
        "router",
        ["inbox"],
        webhook_queues=["inbox"],
        source_types=["generic"],
        webhook_max=1,
    )
    made = await webhooks.create_webhook(runtime, owner, "generic", "inbox")
    return owner, str(made["webhook_id"])


def _each_refused_on_one_line(
    cli: CLI, hook: str, cases: dict[str, list[str]], message: Callable[[str], str]
) -> None:
    """Each command in ``cases`` exits 2 with one line, ``message(what)`` (``what``: its key,
    stripped: trailing spaces only keep the keys apart), and the webhook's rules are unchanged."""
    fast = cli.fast()
    for what, argv in cases.items():
        proc = fast.run(*argv, check=False)
        assert proc.returncode == 2, (argv, proc.stderr)
        expected = f"switchboard: error: invalid_argument: {message(what.strip())}\n"
        assert proc.stderr == expected, argv
    shown = fast.json("webhook", "rules", "show", hook)
    assert (shown["rules"], shown["version"]) == ([], 0), shown  # nothing saved


async def test_a_file_that_is_not_utf8_is_named_on_one_line(
    cli: CLI, runtime: Runtime, tmp_path: Path
) -> None:
    owner, hook = await _generic_hook(runtime)
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"\xff\xfe{}")  # a UTF-16 byte-order mark: what some editors save
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"rules": [{"expr": ".a", "action": {"queue": "inbox"}}]}))
    body = tmp_path / "body.json"
    body.write_text('{"a": 1}')
    sample = ["--source", "generic", "--payload", str(body)]
    cases = {
        "FILE": ["rules", "check", str(bad)],
        "FILE ": ["rules", "test", str(bad), *sample],
        "--grant": ["rules", "test", str(good), *sample, "--grant", str(bad)],
        "--headers": ["rules", "test", str(good), *sample, "--headers", str(bad)],
        "CANDIDATE": ["rules", "diff", hook, str(bad)],
        "--file": ["llm", "set", "--endpoint", owner["id"], "--file", str(bad)],
        "FILE  ": ["webhook", "rules", "set", hook, str(bad)],
        "--secret-file": ["webhook", "create", "--endpoint", owner["id"], "--source",
                          "generic", "--target-queue", "inbox", "--secret-file", str(bad)],
    }  # fmt: skip
    _each_refused_on_one_line(
        cli, hook, cases, lambda what: f"{what}: {bad} is not UTF-8 text (byte 0xff at offset 0)"
    )


def test_a_reader_that_goes_away_ends_the_command_quietly(cli: CLI) -> None:
    """``switchboard ... | head -0``: the pipe is closed before the command writes."""
    proc = subprocess.Popen(
        [*SWITCHBOARD, "human", "list"],
        env=cli.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(60) == 141
    assert err == ""


async def test_a_json_file_that_nests_too_deeply_is_named_on_one_line(
    cli: CLI, runtime: Runtime, tmp_path: Path
) -> None:
    owner, hook = await _generic_hook(runtime)
    depth = 100_000  # the JSON parser recurses into each array: past any recursion limit
    deep = tmp_path / "deep.json"
    deep.write_text('{"rules": [], "params": {"a": ' + "[" * depth + "]" * depth + "}}")
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"rules": [{"expr": ".a", "action": {"queue": "inbox"}}]}))
    body = tmp_path / "body.json"
    body.write_text('{"a": 1}')
    sample = ["--source", "generic", "--payload", str(body)]
    create = ["webhook", "create", "--endpoint", owner["id"], "--source", "generic",
              "--target-queue", "inbox"]  # fmt: skip
    cases = {
        f"FILE: {deep}": ["rules", "check", str(deep)],
        f"--grant: {deep}": ["rules", "test", str(good), *sample, "--grant", str(deep)],
        f"--headers: {deep}": ["rules", "test", str(good), *sample, "--headers", str(deep)],
        f"--file: {deep}": ["llm", "set", "--endpoint", owner["id"], "--file", str(deep)],
        f"FILE: {deep} ": ["webhook", "rules", "set", hook, str(deep)],
        f"--source-config: {deep}": [*create, "--source-config", f"@{deep}"],
        "--source-config": [*create, "--source-config", "[" * depth + "]" * depth],
    }
    _each_refused_on_one_line(
        cli,
        hook,
        cases,
        lambda what: f"{what} nests too deeply (arrays or objects inside each other)",
    )
