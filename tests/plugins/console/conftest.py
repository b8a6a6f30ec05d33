"""The console's browser fixtures: one Chromium per module, a fresh context per test, and
the run's screenshots directory (each module's server comes from its own ``seeded``)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


def _chromium() -> str | None:
    path = os.environ.get("SWITCHBOARD_TEST_CHROMIUM") or "/usr/bin/chromium"
    return path if Path(path).exists() or shutil.which(path) else None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    path = _chromium()
    if path is None:
        if os.environ.get("SWITCHBOARD_TEST_REQUIRE_BROWSER"):
            pytest.fail(
                "SWITCHBOARD_TEST_REQUIRE_BROWSER is set but no Chromium at"
                " /usr/bin/chromium (or SWITCHBOARD_TEST_CHROMIUM)"
            )
        pytest.skip(
            "no Chromium at /usr/bin/chromium (apt-get install chromium, or set"
            " SWITCHBOARD_TEST_CHROMIUM)"
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=path, args=["--no-sandbox"])
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Any, seeded: Any) -> Iterator[Any]:
    context = browser.new_context(base_url=seeded["base"], viewport={"width": 1280, "height": 900})
    context.set_default_timeout(10_000)
    pg = context.new_page()
    pg.dialogs = []
    pg.on("dialog", lambda d: (pg.dialogs.append(d.message), d.dismiss()))
    try:
        yield pg
    finally:
        context.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("console-screenshots")
