"""The package as installed: data files shipped, CI runs the README's test command."""

from __future__ import annotations

import os
import re
from pathlib import Path

import switchboard
from switchboard.resources import load_schema, migrations_dir, schemas_dir

ROOT = Path(__file__).resolve().parents[1]


def test_schemas_have_ids_and_the_draft() -> None:
    paths = sorted(schemas_dir().glob("*.schema.json"))
    assert paths
    for path in paths:
        doc = load_schema(path.name.removesuffix(".schema.json"))
        assert doc["$schema"] == "https://json-schema.org/draft/2020-12/schema", path
        assert doc["$id"].endswith(path.name), path


def test_installed_from_the_wheel_when_run_by_tox() -> None:
    if not os.environ.get("SWITCHBOARD_TEST_INSTALLED"):
        return
    pkg = Path(switchboard.__file__).resolve().parent
    assert pkg != ROOT / "switchboard", "tests must import the installed wheel, not the checkout"
    assert schemas_dir() == pkg / "_schemas"
    assert migrations_dir() == pkg / "_migrations"
    assert (migrations_dir() / "0018_event_routing.sql").is_file()


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)\n```", readme.split("## Quickstart", 1)[1], re.S)
    serve_cmd, test_cmd = blocks[0].strip(), blocks[1].strip()
    assert "switchboard serve" in serve_cmd and "SWITCHBOARD_DATABASE_URL" not in serve_cmd
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test_cmd in ci, "the last step of .ci/run must be the README's test command"
    assert ci[-1] == test_cmd
