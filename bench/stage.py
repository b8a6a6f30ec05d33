"""What a third party's routing stage before ``rules`` costs a live delivery.

Run: python bench/stage.py [--total N] [--rounds K] [--clients C]
Two `switchboard serve` processes (1 worker each) on one PostgreSQL and one webhook with
the 32 bench rules: one runs ``routing.stages = ["rules"]``, the other
``["sentry_level", "rules"]`` with the test suite's third-party stage distribution
(tests/plugins/sentrylevel, pip-installed into a directory of its own and put on the
second server's PYTHONPATH) in front. The stage reads the payload and passes, so the rules
decide both ways. The deliveries go in K alternating turns per server; prints each one's
deliveries/s and p50/p99, and the p50 ratio with the stage to without it (issue 34's
target: <= 1.05).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from harness import cli, database, generic_webhook, load, serve, summary  # noqa: E402
from routing import BODY, set_rules  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SENTRY = ROOT / "tests" / "plugins" / "sentrylevel"


def install(site: Path) -> None:
    """pip-install a copy of the stage's distribution (no build output in the tree)."""
    src = shutil.copytree(
        SENTRY, site.parent / "src", ignore=shutil.ignore_patterns("build", "*.egg-info")
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "-q", "install", "--no-deps", "--no-build-isolation",
         "--target", str(site), str(src)],
        check=True,
        capture_output=True,
    )  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--total", type=int, default=2000, help="deliveries per server")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--clients", type=int, default=1)
    args = ap.parse_args()
    with database() as dsn, tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        site = root / "site"
        install(site)
        plain_cfg = root / "plain.toml"
        plain_cfg.write_text('[routing]\nstages = ["rules"]\n')
        staged_cfg = root / "staged.toml"
        staged_cfg.write_text('[routing]\nstages = ["sentry_level", "rules"]\n')
        plain = serve(dsn, root / "a", workers=1, config=plain_cfg)
        previous = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), previous) if p)
        try:
            staged = serve(dsn, root / "b", workers=1, config=staged_cfg)
        finally:
            if previous is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = previous
        try:
            cli(plain.env, "human", "add", "bench")
            hook = generic_webhook(plain.env)
            asyncio.run(set_rules(plain.env, hook["webhook_id"]))
            token = hook["ingest_url"].rsplit("/", 1)[1]
            urls = {
                "rules only": f"{plain.base_url}/webhooks/w/{token}",
                "stage + rules": f"{staged.base_url}/webhooks/w/{token}",
            }
            gh = "X-GitHub-Event: pull_request\r\n"
            for url in urls.values():  # warm up
                asyncio.run(load(url, BODY, 4, 200, gh))
            lat: dict[str, list[float]] = {name: [] for name in urls}
            elapsed = dict.fromkeys(urls, 0.0)
            per_turn = max(1, args.total // args.rounds)
            for _ in range(args.rounds):
                for name, url in urls.items():
                    took, got = asyncio.run(load(url, BODY, args.clients, per_turn, gh))
                    elapsed[name] += took
                    lat[name].extend(got)
        finally:
            plain.stop()
            staged.stop()
    rows = {name: summary(elapsed[name], lat[name]) for name in urls}
    print(
        f"stage benchmark: {per_turn * args.rounds} deliveries per server in {args.rounds}"
        f" alternating turns, {args.clients} client(s), 32 rules, body {len(BODY)} B"
    )
    for name, s in rows.items():
        print(
            f"{name:>14} | {s['per_s']:>7.0f}/s  p50 {s['p50_ms']:6.2f} ms"
            f"  p99 {s['p99_ms']:6.2f} ms"
        )
    ratio = rows["stage + rules"]["p50_ms"] / rows["rules only"]["p50_ms"]
    print(f"p50 with the stage / without: {ratio:.3f} (target <= 1.05)")


if __name__ == "__main__":
    main()
