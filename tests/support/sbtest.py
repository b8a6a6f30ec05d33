"""Helpers the tests share: the real CLI and server as child processes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# The installed console script, never `python -m` from a checkout: tests exercise the
# package exactly as pip installed it.
SWITCHBOARD = [str(Path(sys.executable).with_name("switchboard"))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_env(dsn: str | None, data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
    env["SWITCHBOARD_DATA_DIR"] = str(data_dir)
    env["SWITCHBOARD_SECRET_KEY"] = "test-secret-key-0123456789"
    if dsn:
        env["SWITCHBOARD_DATABASE_URL"] = dsn
    env.update(extra)
    return env


class CLI:
    """Runs the real ``switchboard`` command against one database."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env

    def run(self, *args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [*SWITCHBOARD, *args], env=self.env, capture_output=True, text=True,
            input=input, timeout=120,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"switchboard {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}"
            )
        return proc

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args).stdout)


class Server:
    """A real ``switchboard serve`` child process on a free port."""

    def __init__(self, env: dict[str, str], port: int, log: Path) -> None:
        self.env = env
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}"
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, *extra: str, timeout: float = 60.0) -> Server:
        self._fh = open(self.log, "ab")
        self.proc = subprocess.Popen(
            [*SWITCHBOARD, "serve", "--port", str(self.port), *extra],
            env=self.env, stdout=self._fh, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        import urllib.request

        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited early:\n{self.log.read_text()}")
            try:
                with urllib.request.urlopen(self.base_url + "/healthz", timeout=1) as resp:
                    if resp.status == 200:
                        return self
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"server did not become healthy:\n{self.log.read_text()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.proc is not None:
            self._fh.close()
        self.proc = None


