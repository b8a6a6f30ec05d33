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


def test_every_host_package_is_listed_in_setup_cfg() -> None:
    # setup.cfg lists packages by name, so a new sub-package missing there would be left
    # out of the wheel and only fail once installed.
    listed = re.search(r"^packages =\n((?:    .+\n)+)", (ROOT / "setup.cfg").read_text(), re.M)
    assert listed
    names = {line.strip() for line in listed.group(1).splitlines()}
    for init in sorted((ROOT / "switchboard").rglob("__init__.py")):
        name = ".".join(init.parent.relative_to(ROOT).parts)
        assert name in names, f"setup.cfg [options] packages lacks {name}"
