"""Every command but ``serve`` starts without Sanic and httpx: operators and the test suite
pay for what a command imports on each run (about a third of a plain command's start)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: Runs the real entry point as the console script does, then names what got imported.
CHECK = (
    "import sys\n"
    "from switchboard.cli.main import main\n"
    "try:\n"
    "    main(sys.argv[1:])\n"
    "except SystemExit:\n"
    "    pass\n"
    "print('loaded:', *[m for m in ('sanic', 'httpx') if m in sys.modules])\n"
)


def loaded(tmp_path: Path, *argv: str, first: str = "") -> list[str]:
    """What of Sanic and httpx ``switchboard ARGV`` imported (``first`` runs before it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
    env["SWITCHBOARD_DATA_DIR"] = str(tmp_path / "data")
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
