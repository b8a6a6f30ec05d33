"""Every command but ``serve`` starts without Sanic, httpx and the MCP SDK: operators and the
test suite pay for what a command imports on each run (Sanic and httpx were about a third of
a plain command's start; the MCP SDK, imported by its plugin's shutdown hook, was more than
half of a command that opens the database)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sbtest import CLI

#: Runs the real entry point as the console script does, then names what got imported.
CHECK = (
    "import sys\n"
    "from switchboard.cli.main import main\n"
    "try:\n"
    "    main(sys.argv[1:])\n"
    "except SystemExit:\n"
    "    pass\n"
    "print('loaded:', *[m for m in ('sanic', 'httpx', 'mcp') if m in sys.modules])\n"
)


def loaded(
    tmp_path: Path, *argv: str, first: str = "", env_extra: dict[str, str] | None = None
) -> list[str]:
    """What of Sanic, httpx and the MCP SDK ``switchboard ARGV`` imported (``first`` runs
    before it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
    env["SWITCHBOARD_DATA_DIR"] = str(tmp_path / "data")
    env.update(env_extra or {})
    proc = subprocess.run(
        [sys.executable, "-c", first + CHECK, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    last = (proc.stdout.splitlines() or [""])[-1]
    assert last.startswith("loaded:"), proc.stdout + proc.stderr
    return last.split()[1:]


def test_a_command_other_than_serve_imports_neither_sanic_nor_httpx(tmp_path: Path) -> None:
    assert loaded(tmp_path, "--help") == []
    assert loaded(tmp_path, "rules", "check", "--help") == []
    # the probe sees them when they are there (serve's metrics module brings Sanic)
    assert loaded(tmp_path, "--help", first="import switchboard.scrape, httpx\n") == [
        "sanic",
        "httpx",
    ]


def test_a_command_on_the_database_never_imports_the_mcp_sdk(tmp_path: Path, cli: CLI) -> None:
    """A command that opens (and so shuts down) a runtime: the MCP plugin's shutdown hook
    stops a session manager only where one was started, without importing the SDK."""
    database = {k: v for k, v in cli.env.items() if k.startswith("SWITCHBOARD_")}
    assert loaded(tmp_path, "human", "add", "ada", env_extra=database) == []
    assert loaded(tmp_path, "human", "list", env_extra=database) == []
    # the probe sees it when it is there
    assert loaded(tmp_path, "human", "list", first="import mcp\n", env_extra=database) == ["mcp"]


#: Builds the app as ``serve``'s main process does for its workers (Sanic's loader calls
#: this factory), then names the MCP routes and whether the SDK got imported.
BUILD = (
    "import sys\n"
    "from switchboard.app import app_from_environment\n"
    "app = app_from_environment()\n"
    "print('routes:', *sorted(r.path for r in app.router.routes if 'mcp' in r.path))\n"
    "print('loaded:', *[m for m in ('mcp',) if m in sys.modules])\n"
)


def test_building_the_app_as_serves_main_process_does_imports_no_mcp_sdk(tmp_path: Path) -> None:
    """``serve``'s main process builds the app to hand to its workers and serves nothing:
    ``/mcp`` is registered without the SDK, which each worker's start-up imports (0.7 s off
    a two-worker start here, and ~25 MB off the main process)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
    env["SWITCHBOARD_DATA_DIR"] = str(tmp_path / "data")
    for first, sdk in (("", ""), ("import mcp\n", " mcp")):  # the probe sees it when there
        proc = subprocess.run(
            [sys.executable, "-c", first + BUILD],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            cwd=tmp_path,
        )
        assert proc.stdout.splitlines()[-2:] == ["routes: mcp", f"loaded:{sdk}"], (
            proc.stdout + proc.stderr
        )
