"""The README's LLM triage example is a config that loads and settings that validate."""

from __future__ import annotations

import json
import re
from pathlib import Path

from switchboard_llm.settings import check_triage
from switchboard_llm.stage import DEFAULTS

from switchboard.config import load_config
from switchboard.runtime import Runtime

README = Path(__file__).resolve().parents[3] / "README.md"


def _section() -> str:
    return README.read_text(encoding="utf-8").split("## LLM triage", 1)[1].split("\n## ", 1)[0]


def test_the_readme_config_and_settings_are_valid(tmp_path: Path) -> None:
    section = _section()
    [toml] = re.findall(r"```toml\n(.*?)```", section, re.S)
    path = tmp_path / "switchboard.toml"
    path.write_text(toml)
    rt = Runtime(load_config(path, env={}))
    assert rt.registries.llm_providers.names() == ["local", "static"]
    assert [s.name for s in rt.stages] == ["rules", "llm"]
    # The ceilings it shows are the defaults.
    assert {k: v for k, v in rt.config.plugin("llm").items() if k != "providers"} == {
        k: v for k, v in DEFAULTS.items() if k != "providers"
    }

    [triage] = re.findall(r"<<'JSON'\n(.*?)\nJSON", section, re.S)
    saved = check_triage(
        json.loads(triage),
        DEFAULTS,
        ["inbox", "review", "incidents"],
        rt.registries.llm_providers.names(),
    )
    assert saved["provider"] == "static" and saved["timeout_ms"] == 5000
