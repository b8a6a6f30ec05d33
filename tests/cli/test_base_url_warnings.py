"""Handed-out URLs that would reach nothing are warned about: serve at start, vend and create."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from sbtest import CLI, SWITCHBOARD, free_port, make_env, stop_process_group

WARNED = "is on port 8080, but the server listens on port"


def _serve_log(env: dict[str, str], port: int, log: Path) -> str:
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [*SWITCHBOARD, "serve", "--port", str(port), "--workers", "1"],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while True:
                assert proc.poll() is None, log.read_text()
                try:
                    httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                    break
                except httpx.TransportError:
                    assert time.monotonic() < deadline, log.read_text()
                    time.sleep(0.2)
        finally:
            stop_process_group(proc)
    return log.read_text()


@pytest.mark.slow
def test_serve_warns_once_when_base_urls_port_is_not_its_own(dsn: str, tmp_path: Path) -> None:
    port = free_port()
    # `serve --port` without a base URL: the URLs it hands out would say :8080
    text = _serve_log(make_env(dsn, tmp_path / "data"), port, tmp_path / "serve.log")
    warned = [line for line in text.splitlines() if WARNED in line]
    assert len(warned) == 1, text
    record = json.loads(warned[0])  # one log record (JSON lines when not on a terminal)
    assert (record["level"], record["logger"]) == ("warning", "switchboard.serve")
    assert record["message"].startswith(
        f"the default base_url http://127.0.0.1:8080 {WARNED} {port}:"
    )
    # base_url on the port it listens on: nothing to say
    env = make_env(dsn, tmp_path / "data", SWITCHBOARD_BASE_URL=f"http://127.0.0.1:{port}")
    text = _serve_log(env, port, tmp_path / "serve2.log")
    assert "but the server listens on port" not in text, text


def test_vend_and_create_warn_when_the_default_base_url_misses_the_listen_port(
    dsn: str, tmp_path: Path
) -> None:
    cli = CLI(make_env(dsn, tmp_path / "data", SWITCHBOARD_ADDR="127.0.0.1:9000")).fast()
    cli.run("human", "add", "alice")
    vend = cli.run(
        "endpoint", "vend", "--owner", "alice", "--name", "a",
        "--webhook-queues", "inbox", "--source-types", "generic", "--webhook-max", "4",
    )  # fmt: skip
    line = (
        "switchboard: warning: the default base_url http://127.0.0.1:8080 is on port 8080,"
        " but the server listens on port 9000"
    )
    assert vend.stderr.startswith(line), vend.stderr
    assert '"mcp_url": "http://127.0.0.1:8080/mcp"' in vend.stdout  # still printed, as is
    endpoint = json.loads(vend.stdout)["endpoint_id"]
    create = cli.run(
        "webhook", "create", "--endpoint", endpoint, "--source", "generic",
        "--target-queue", "inbox",
    )  # fmt: skip
    assert create.stderr.startswith(line), create.stderr
    # A base_url written on purpose (a proxy's public URL) is not second-guessed here,
    # and the default on the default port is right.
    for extra in ({"SWITCHBOARD_BASE_URL": "https://hooks.example"}, {"SWITCHBOARD_ADDR": ""}):
        quiet = CLI({**cli.env, **extra}).fast()
        made = quiet.run(
            "webhook", "create", "--endpoint", endpoint, "--source", "generic",
            "--target-queue", "inbox",
        )  # fmt: skip
        assert "warning" not in made.stderr, (extra, made.stderr)
