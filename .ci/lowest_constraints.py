"""Write pip constraints pinning every dependency setup.cfg declares to its declared floor.

    python .ci/lowest_constraints.py OUT.txt [SETUP_CFG]

Each ``name>=X`` of ``install_requires`` and of the ``test`` extra becomes ``name==X``
(its environment marker kept), so ``pip install -c OUT.txt '.[test]'`` installs the lowest
versions the package claims to work with; the ``lowest`` tox env then runs the tests on
them. A requirement without a floor is left to the resolver (and listed on stderr).
Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import configparser
import re
import sys
from pathlib import Path

_REQ = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(?P<spec>[^;]*?)\s*"
    r"(?:;\s*(?P<marker>.+))?$"
)


def requirements(setup_cfg: Path) -> list[str]:
    cfg = configparser.ConfigParser()
    cfg.read(setup_cfg, encoding="utf-8")
    text = cfg.get("options", "install_requires")
    text += "\n" + cfg.get("options.extras_require", "test", fallback="")
    return [
        line.strip()
        for line in text.splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]


def constraints(reqs: list[str]) -> tuple[list[str], list[str]]:
    """``(pins, unpinned)``: a ``name==floor`` line per floored requirement, and the rest."""
    pins, unpinned = [], []
    for req in reqs:
        m = _REQ.match(req)
        if m is None:
            raise SystemExit(f"lowest_constraints: cannot read requirement {req!r}")
        floor = [
            s.strip()[2:].strip()
            for s in m["spec"].split(",")
            if s.strip().startswith((">=", "=="))
        ]
        if not floor:
            unpinned.append(req)
            continue
        line = f"{m['name']}=={floor[0]}"
        pins.append(f"{line}; {m['marker']}" if m["marker"] else line)
    return pins, unpinned


def main(argv: list[str]) -> int:
    if not 1 <= len(argv) <= 2:
        print(__doc__, file=sys.stderr)
        return 2
    setup_cfg = (
        Path(argv[1]) if len(argv) == 2 else Path(__file__).resolve().parents[1] / "setup.cfg"
    )
    pins, unpinned = constraints(requirements(setup_cfg))
    Path(argv[0]).write_text(
        f"# The lowest versions {setup_cfg.name} declares (.ci/lowest_constraints.py).\n"
        + "".join(p + "\n" for p in pins),
        encoding="utf-8",
    )
    for req in unpinned:
        print(
            f"lowest_constraints: {req!r} declares no floor; the resolver picks it", file=sys.stderr
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
