"""Where a delivery's CPU goes: the receiver under load, sampled by py-spy.

Run: python bench/profile_ingest.py [--total N] [--clients C] [--workers W] [--rules] [--top K]
[--log-summary] [--body 5k|small]
Starts `switchboard serve` (serve's own worker count unless --workers) on an embedded
PostgreSQL, loads one generic webhook (32 rules with --rules, none by default) with N
unique ~5 KB deliveries (575 B, ingest.py's, with --body small) over C keep-alive clients, and meanwhile samples every Sanic
worker with py-spy (`record --format raw --nonblocking`: the workers run unchanged). Prints
the workers' CPU per delivery (their rusage over the run divided by the deliveries) and the
top K frames by self time (the leaf of each sample) and by total time (anywhere on the
stack), as shares of all samples. py-spy is a sampling profiler that attaches to a running
process; it is the `bench` extra (`pip install -e .[bench]`).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from harness import cli, database, generic_webhook, load, py_spy, serve, summary  # noqa: E402
from ingest import BODY as BODY_SMALL  # noqa: E402
from procs import cpus, shares, workers  # noqa: E402
from routing import BODY as BODY_5K  # noqa: E402
from routing import set_rules  # noqa: E402


def frames(raw: Path) -> tuple[Counter[str], Counter[str], int]:
    """(self samples, total samples, all samples) by frame, from py-spy's raw format: one
    line per distinct stack, ``frame;frame;...;leaf count``."""
    own: Counter[str] = Counter()
    anywhere: Counter[str] = Counter()
    samples = 0
    for line in raw.read_text(encoding="utf-8", errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit() or not stack:
            continue
        n = int(count)
        samples += n
        chain = stack.split(";")
        own[_short(chain[-1])] += n
        for frame in set(map(_short, chain)):
            anywhere[frame] += n
    return own, anywhere, samples


def _short(frame: str) -> str:
    # "handle (switchboard/receiver.py:123)" -> "handle (switchboard/receiver.py)": one row
    # per function, not per line.
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    for marker in ("site-packages/", "/switchboard/", "/plugins/", "lib/python3"):
        if marker in path:
            path = path[path.index(marker) + len(marker) :]
            break
    return f"{name} ({path})" if path else name


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--total", type=int, default=5000)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--rules", action="store_true", help="32 rules on the webhook")
    ap.add_argument(
        "--log-summary",
        action="store_true",
        help='[log] deliveries = "summary": a line a second, not one per delivery',
    )
    ap.add_argument("--body", choices=("5k", "small"), default="5k")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    ap.add_argument("--keep", type=Path, default=None, help="copy py-spy's raw files here")
    ap.add_argument(
        "--native", action="store_true", help="C frames too (py-spy pauses each sample)"
    )
    args = ap.parse_args()
    spy = py_spy()
    body = BODY_5K if args.body == "5k" else BODY_SMALL
    with database() as dsn, tempfile.TemporaryDirectory() as tmp:
        config = None
        if args.log_summary:
            config = Path(tmp) / "sb.toml"
            config.write_text('[log]\ndeliveries = "summary"\n')
        srv = serve(dsn, Path(tmp), workers=args.workers, config=config)
        try:
            cli(srv.env, "human", "add", "bench")
            hook = generic_webhook(srv.env)
            if args.rules:
                asyncio.run(set_rules(srv.env, hook["webhook_id"]))
            asyncio.run(load(hook["ingest_url"], body, 8, 500))  # warm up
            procs = workers(srv.proc.pid)
            spies = []
            for proc in procs:
                out = Path(tmp) / f"spy-{proc.pid}.txt"
                spies.append(
                    (
                        out,
                        subprocess.Popen(
                            [spy, "record", "--pid", str(proc.pid), "--rate", str(args.rate),
                             "--format", "raw", "--output", str(out),
                             *(["--native"] if args.native else ["--nonblocking"])],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                        ),
                    )
                )  # fmt: skip
            time.sleep(1.0)  # py-spy attached
            before = cpus(procs)
            elapsed, lat = asyncio.run(load(hook["ingest_url"], body, args.clients, args.total))
            each = [b - a for a, b in zip(before, cpus(procs), strict=True)]
            used = sum(each)
            for _, p in spies:
                p.send_signal(2)  # SIGINT: py-spy writes its file and exits
            for _, p in spies:
                p.wait(30)
            own: Counter[str] = Counter()
            anywhere: Counter[str] = Counter()
            samples = 0
            for out, _ in spies:
                if out.exists() and args.keep is not None:
                    args.keep.mkdir(parents=True, exist_ok=True)
                    shutil.copy(out, args.keep / out.name)
                if out.exists():
                    o, a, n = frames(out)
                    own.update(o)
                    anywhere.update(a)
                    samples += n
        finally:
            srv.stop()
    s = summary(elapsed, lat)
    print(
        f"{len(procs)} server process(es), {args.clients} clients, {args.total} deliveries"
        f"{' to 32 rules' if args.rules else ''}: {s['per_s']:.0f}/s, p50 {s['p50_ms']:.2f} ms,"
        f" p99 {s['p99_ms']:.2f} ms"
    )
    print(
        f"workers' CPU per delivery: {used / args.total * 1e6:.0f} µs ({used:.2f} s in all;"
        f" by worker {shares(each)})"
    )
    print(f"\n{samples} samples; top {args.top} frames by self time:")
    for frame, n in own.most_common(args.top):
        print(f"  {n / max(1, samples):6.1%}  {frame}")
    print(f"\ntop {args.top} of our own frames by total time (anywhere on the stack):")
    ours = [(f, n) for f, n in anywhere.most_common() if "switchboard" in f or "plugins" in f][
        : args.top
    ]
    for frame, n in ours:
        print(f"  {n / max(1, samples):6.1%}  {frame}")


if __name__ == "__main__":
    main()
