"""Routing cost end to end: a webhook with 32 rules vs the same webhook without rules.

Run: python bench/routing.py [--total N] [--rounds K] [--sandbox] [--forge | --regex]
Posts a ~5 KB payload to two generic webhooks on one `switchboard serve` and prints, per
webhook, deliveries/s and p50/p99 latency at 1, 8 and 32 clients, the CPU per delivery of
the whole server process tree (server, fork server, zygotes and the evaluators they
reaped), how many routed deliveries were degraded by `sandbox_busy`, and the ratios the
sandbox v2 issue targets (routed vs plain, measured side by side in this one run: each row's
deliveries go in K turns that alternate with the other row's), then the sandbox tree's
memory (PSS). The bench's rules are simple comparisons, which the server decides itself
(``[plugins.rules] direct``); ``--sandbox`` turns that off, so every routed delivery goes
to the sandbox (what a rule set with anything else in it costs). ``--forge`` gives the
webhook 32 rules of the shape a forge's owner writes (a case-blind repository prefix,
``startswith``, ``length``, pipes), which the server decides too; ``--regex`` 32 rules
that ``test`` a regex (a repository and an action), which it decides with RE2.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).parent))
from harness import RULES, cli, database, generic_webhook, load, serve, summary  # noqa: E402

BODY = json.dumps(
    {
        "action": "opened",
        "number": 42,
        "repository": {"full_name": "org/app", "private": False},
        "pull_request": {
            f"field_{i}": {"value": "x" * 40, "n": i, "tags": ["a", "b"]} for i in range(55)
        },
    }
).encode()


def tree_cpu(pid: int) -> tuple[float, float]:
    """CPU seconds of the server's whole process tree, and of its sandbox trees alone."""
    root = psutil.Process(pid)
    total = sandbox = 0.0
    for proc in [root, *root.children(recursive=True)]:
        try:
            t = proc.cpu_times()
            own = t.user + t.system + t.children_user + t.children_system
            if "sandbox_child" in " ".join(proc.cmdline()):  # forks keep the fork server's
                sandbox += own
        except psutil.Error:
            continue
        total += own
    return total, sandbox


def _rules(prefix: str, name: str, expr: str) -> list[dict[str, Any]]:
    """32 rules, ``expr`` formatted with each one's number ``i``, queueing to inbox."""
    return [
        {"id": f"{prefix}{i}", "name": f"{name} {i}", "expr": expr.replace("{i}", str(i)),
         "action": {"queue": "inbox"}}
        for i in range(32)
    ]  # fmt: skip


# 32 rules of a forge's usual shape (pipes, ascii_downcase, startswith, length), none of
# which matches the bench body either: every delivery evaluates them all.
FORGE_RULES = _rules(
    "f",
    "release",
    '(.payload.repository.full_name | ascii_downcase | startswith("org/repo-{i}/"))'
    ' and (.payload.pull_request | length) > 0 and .headers["x-github-event"] != "ping"',
)
# 32 rules that test regexes (jqregex.py's subset), none of which matches the bench body.
REGEX_RULES = _rules(
    "x",
    "service",
    '(.payload.repository.full_name | test("^org/(api|web)-{i}(-[a-z0-9]+)?$"))'
    ' and (.payload.action | test("^(opened|synchronize|reopened)$"))',
)


async def set_rules(env: dict[str, str], webhook_id: str, ruleset: list[Any] | None = None) -> None:
    from switchboard.config import load_config
    from switchboard.runtime import Runtime
    from switchboard.service import rules

    rt = Runtime(load_config(env=env))
    await rt.open_store(migrate=False)
    try:
        await rules.set_rules(rt, None, webhook_id, RULES if ruleset is None else ruleset)
    finally:
        await rt.shutdown()


def tree_pss_mib(pid: int) -> float:
    """The proportional set size of the server's sandbox trees (fork servers and below)."""
    total = 0
    for proc in psutil.Process(pid).children(recursive=True):
        try:
            if "sandbox_child" not in " ".join(proc.cmdline()):
                continue
            total += sum(p.memory_full_info().pss for p in [proc, *proc.children(recursive=True)])
        except psutil.Error:
            continue
    return total / 2**20


def busy_count(dsn: str, webhook_id: str) -> int:
    import psycopg

    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM events WHERE webhook_id = %s"
            " AND routing_trace::text LIKE '%%sandbox_busy%%'",
            (webhook_id,),
        ).fetchone()
    return int(row[0]) if row else 0


def measure(
    srv: Any,
    dsn: str,
    hooks: list[tuple[str, dict[str, Any]]],
    clients: int,
    total: int,
    rounds: int,
) -> dict[str, dict[str, float]]:
    """Each webhook's figures over ``total`` deliveries, sent in ``rounds`` alternating turns.

    Alternating (plain, routed, plain, routed, ...) spreads whatever the machine does
    meanwhile (another process, a slow second) over both rows, so their ratio stays put.
    """
    took = {name: 0.0 for name, _ in hooks}
    lat: dict[str, list[float]] = {name: [] for name, _ in hooks}
    cpu = {name: [0.0, 0.0] for name, _ in hooks}
    busy = {name: -busy_count(dsn, hook["webhook_id"]) for name, hook in hooks}
    for k in range(rounds):
        share = total // rounds + (1 if k < total % rounds else 0)
        for name, hook in hooks:
            before, before_sb = tree_cpu(srv.proc.pid)
            elapsed, got = asyncio.run(load(hook["ingest_url"], BODY, clients, share))
            after, after_sb = tree_cpu(srv.proc.pid)
            took[name] += elapsed
            lat[name] += got
            cpu[name][0] += after - before
            cpu[name][1] += after_sb - before_sb
    out = {}
    for name, hook in hooks:
        stats = summary(took[name], lat[name])
        stats["cpu_ms"] = cpu[name][0] / total * 1000
        stats["sandbox_ms"] = cpu[name][1] / total * 1000
        stats["busy"] = busy[name] + busy_count(dsn, hook["webhook_id"])
        out[name] = stats
    return out


def plain_and_routed(
    srv: Any, ruleset: list[Any] | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """Two generic webhooks on ``srv``: ``no rules``, and ``32 rules`` (``ruleset``, else
    :data:`RULES`),
    each warmed up (the fork server, the zygote, the pool)."""
    cli(srv.env, "human", "add", "bench")
    hooks = [generic_webhook(srv.env, name) for name in ("plain", "routed")]
    asyncio.run(set_rules(srv.env, hooks[1]["webhook_id"], ruleset))
    gh = "X-GitHub-Event: pull_request\r\n"
    for hook in hooks:
        asyncio.run(load(hook["ingest_url"], BODY, 4, 100, gh))
    return [("no rules", hooks[0]), ("32 rules", hooks[1])]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--total", type=int, default=1000)
    ap.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="alternating turns per row (plain, routed, plain, ...)",
    )
    ap.add_argument(
        "--sandbox",
        action="store_true",
        help="every routed delivery to the sandbox ([plugins.rules] direct = false)",
    )
    ap.add_argument(
        "--forge",
        action="store_true",
        help="32 rules of a forge's usual shape (startswith, length, pipes) instead",
    )
    ap.add_argument("--regex", action="store_true", help="32 rules that test regexes instead (RE2)")
    args = ap.parse_args()
    with database() as dsn, tempfile.TemporaryDirectory() as tmp:
        config = None
        if args.sandbox:
            config = Path(tmp) / "sandbox.toml"
            config.write_text("[plugins.rules]\ndirect = false\n")
        srv = serve(dsn, Path(tmp), config=config)
        try:
            ruleset = REGEX_RULES if args.regex else FORGE_RULES if args.forge else RULES
            named = plain_and_routed(srv, ruleset)
            print(
                f"routing benchmark: {args.total} deliveries per row in {args.rounds}"
                f" alternating turns, body {len(BODY)} B, 1 Sanic worker,"
                f" {'regex ' if args.regex else 'forge-shaped ' if args.forge else ''}rules"
                f" {'all in the sandbox' if args.sandbox else 'decided where they can be'}"
            )
            print(
                f"{'webhook':>10} {'clients':>7} | {'per s':>7} {'p50 ms':>7} {'p99 ms':>7}"
                f" {'CPU ms':>7} {'of it sandbox':>13} {'busy':>5}"
            )
            rows = {}
            for clients in (1, 8, 32):
                measured = measure(srv, dsn, named, clients, args.total, args.rounds)
                for name, _ in named:
                    s = rows[(name, clients)] = measured[name]
                    print(
                        f"{name:>10} {clients:>7} | {s['per_s']:>7.0f} {s['p50_ms']:>7.2f}"
                        f" {s['p99_ms']:>7.2f} {s['cpu_ms']:>7.2f} {s['sandbox_ms']:>13.2f}"
                        f" {s['busy']:>5.0f}"
                    )
            base, ruled = rows[("no rules", 1)], rows[("32 rules", 1)]
            print(
                f"added at 1 client: p50 {ruled['p50_ms'] - base['p50_ms']:+.2f} ms,"
                f" CPU {ruled['cpu_ms'] - base['cpu_ms']:+.2f} ms per delivery"
            )
            print(
                f"ratio routed/plain at 1 client: p50 {ruled['p50_ms'] / base['p50_ms']:.2f}"
                f" (target <= 1.3), CPU {ruled['cpu_ms'] / base['cpu_ms']:.2f}"
                " (target <= 1.5)"
            )
            for clients in (8, 32):
                r = rows[("32 rules", clients)]["per_s"] / rows[("no rules", clients)]["per_s"]
                print(
                    f"ratio routed/plain deliveries/s at {clients} clients: {r:.2f}"
                    f" (target >= 0.8); sandbox_busy {rows[('32 rules', clients)]['busy']:.0f}"
                )
            print(f"sandbox tree memory (PSS): {tree_pss_mib(srv.proc.pid):.1f} MiB")
        finally:
            srv.stop()


if __name__ == "__main__":
    main()
