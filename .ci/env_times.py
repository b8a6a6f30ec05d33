"""Print each tox env's wall time from the result files tox wrote (``TOX_RESULT_JSON``).

    python3 .ci/env_times.py RESULT.json [RESULT.json ...]

One line per env, in the order run: its outcome, its seconds (setup: creating the env and
installing the package; run: its commands), then the total. Standard library only.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def rows(paths: list[Path]) -> list[tuple[str, str, float, float]]:
    """``(env, outcome, setup_s, run_s)`` for every env of every result file that exists."""
    out = []
    for path in paths:
        if not path.is_file():
            continue
        for name, env in json.loads(path.read_text(encoding="utf-8"))["testenvs"].items():
            result = env.get("result")
            if name.startswith(".") or not result:
                continue  # the package build, or an env this run did not reach
            if result.get("skipped"):
                outcome = "skipped"
            else:
                outcome = "ok" if result.get("success") else f"FAIL ({result.get('exit_code')})"
            setup = sum(c.get("elapsed", 0.0) for c in env.get("setup", []))
            run = sum(c.get("elapsed", 0.0) for c in env.get("test", []))
            out.append((name, outcome, setup, run))
    return out


def main(argv: list[str]) -> int:
    table = rows([Path(a) for a in argv])
    if not table:
        print("ci: no tox results to time", file=sys.stderr)
        return 0
    print("ci: wall time per tox env (setup = env and install, run = its commands)")
    for name, outcome, setup, run in table:
        print(
            f"ci:   {name:<8} {outcome:<9} {setup + run:7.0f} s  (setup {setup:5.0f}, run {run:6.0f})"
        )
    print(f"ci:   {'total':<8} {'':<9} {sum(s + r for _, _, s, r in table):7.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
