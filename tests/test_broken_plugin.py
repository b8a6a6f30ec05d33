"""A broken third-party plugin: one paragraph naming it and what is wrong, exit 2, and the
operator can start without it by disabling it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sbtest import make_env

#: A plugin registering one routing stage called ``name``.
_STAGE = (
    "from switchboard.plugin import StageResult, hookimpl\n\n"
    "class Stage:\n    name = {name!r}\n\n"
    "    async def route(self, ctx):\n        return StageResult()\n\n"
    "@hookimpl\ndef switchboard_register_routing_stages(register):\n"
    "    register.add(Stage())\n"
)

#: (case, the plugin module's source, what the paragraph must say)
BROKEN = [
    (
        "import fails",
        "import sentry_sdk_that_is_not_installed\n",
        "import failed: ModuleNotFoundError: No module named 'sentry_sdk_that_is_not_installed'",
    ),
    (
        "wrong hook signature",
        "from switchboard.plugin import hookimpl\n\n"
        "@hookimpl\ndef switchboard_register_sources(register, cfg):\n    pass\n",
        "`switchboard_register_sources` got an unexpected argument `cfg` (the hook offers: "
        "register, config)",
    ),
    (
        "a hook that does not exist",
        "from switchboard.plugin import hookimpl\n\n"
        "@hookimpl\ndef switchboard_register_source(register):\n    pass\n",
        "`switchboard_register_source` is not a Switchboard hook (did you mean "
        "`switchboard_register_sources`?)",
    ),
    (
        "a stage named outside the trace's names",
        _STAGE.format(name="Sentry-Level"),
        "routing stage 'Sentry-Level': name 'Sentry-Level' is not a trace name",
    ),
    (
        "a stage with a reserved name",
        _STAGE.format(name="default"),
        "routing stage 'default': name 'default' is reserved",
    ),
]


def _install(site: Path, source: str) -> None:
    """A distribution ``switchboard-sentry 0.3.1`` with entry point ``sentry``, as pip
    would leave it in site-packages."""
    (site / "switchboard_sentry").mkdir(parents=True)
    (site / "switchboard_sentry" / "__init__.py").write_text(source)
    info = site / "switchboard_sentry-0.3.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: switchboard-sentry\nVersion: 0.3.1\n"
    )
    (info / "entry_points.txt").write_text("[switchboard]\nsentry = switchboard_sentry\n")


def _switchboard(tmp_path: Path, site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = make_env(None, tmp_path / "data")
    env["PYTHONPATH"] = str(site)
    return subprocess.run(
        [sys.executable, "-m", "switchboard.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("case,source,says", BROKEN, ids=[b[0] for b in BROKEN])
def test_a_broken_plugin_is_one_paragraph_and_can_be_disabled(
    tmp_path: Path, case: str, source: str, says: str
) -> None:
    site = tmp_path / "site"
    _install(site, source)
    proc = _switchboard(tmp_path, site, "plugins")
    assert proc.returncode == 2, (case, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(
        "switchboard: error: plugin 'sentry' cannot be loaded (distribution "
        "switchboard-sentry 0.3.1, entry point sentry = switchboard_sentry): "
    ), lines[0]
    assert says in lines[0] and 'disabled_plugins = ["sentry"]' in lines[0]
    config = tmp_path / "switchboard.toml"
    config.write_text('disabled_plugins = ["sentry"]\n')
    ok = _switchboard(tmp_path, site, "--config", str(config), "plugins")
    assert ok.returncode == 0, ok.stderr
    assert "sentry" not in [p["name"] for p in __import__("json").loads(ok.stdout)]
