"""The preset source distributions (``plugins/switchboard-*``), installed as a user would.

Each preset is its own distribution: this package installs them all, from copies of their
directories, into one directory of its own (``pip install --target``), puts it on
``sys.path`` for this package's tests (and on ``PYTHONPATH`` for the servers they start),
and takes it off again afterwards, so no other test ever sees them.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from sbpresets import PRESETS
from sbtest import make_env

from switchboard.config import load_config
from switchboard.runtime import Runtime


@pytest.fixture(scope="package")
def preset_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The directory the presets are installed into (on ``sys.path`` while this runs)."""
    root = tmp_path_factory.mktemp("presets")
    sources = []
    for preset in PRESETS:
        copy = shutil.copytree(
            preset,
            root / "src" / preset.name,
            ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"),
        )
        sources.append(str(copy))
    site = root / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--disable-pip-version-check",
            "-q",
            "install",
            "--no-deps",
            "--no-build-isolation",
            "--no-compile",
            "--target",
            str(site),
            *sources,
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    sys.path.insert(0, str(site))
    try:
        yield site
    finally:
        sys.path.remove(str(site))
        for name in [
            m
            for m in sys.modules
            if m.startswith("switchboard_")
            and str(site) in str(getattr(sys.modules[m], "__file__", "") or "")
        ]:
            del sys.modules[name]


@pytest.fixture
async def preset_runtime(preset_site: Path, dsn: str, tmp_path: Path) -> AsyncIterator[Runtime]:
    """An in-process runtime on a fresh database that sees the installed presets."""
    rt = Runtime(load_config(env=make_env(dsn, tmp_path / "data")))
    await rt.open_store(migrate=False)
    try:
        yield rt
    finally:
        await rt.shutdown()
