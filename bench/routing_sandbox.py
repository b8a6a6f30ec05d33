"""Benchmark the routing sandbox: latency and CPU per evaluation, compile-once vs per-call.

Run: python bench/routing_sandbox.py [--hostile N]
First the evaluator's own loop in this process, a sweep against rule by rule (the bench's
32 rules on the envelope cut to what they read, as the stage sends it); then the sandbox
itself. Then N hostile evaluations (memory bombs, infinite recursion, a catastrophic regex, long
loops, an evaluator crash; default 1000) and the memory of this process and of the sandbox
tree (PSS) before and after them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psutil
from switchboard_rules.sandbox import Limits, Sandbox
from switchboard_rules.stage import DEFAULTS

sys.path.insert(0, str(Path(__file__).parent))
from harness import tree_cpu  # noqa: E402

N = 300


def envelope() -> dict[str, Any]:
    body = {f"field_{i}": {"value": "x" * 40, "n": i, "tags": ["a", "b"]} for i in range(55)}
    env = {
        "source": "gitea", "kind": "pull_request", "webhook_id": "wh", "trust_mode": "signed",
        "verified": True, "content_type": "application/json", "size": 5000,
        "headers": {"x-gitea-event": "pull_request", "content-type": "application/json"},
        "payload": {"action": "opened", "number": 42, "body": body},
    }  # fmt: skip
    return env


def rules() -> list[tuple[str | None, str]]:
    return [
        (
            f"r{i}",
            f'.kind == "kind_{i}" and .payload.number == {i} and (.headers["x-a"] // "") != "z"',
        )
        for i in range(32)
    ]


def own_cpu() -> float:
    t = os.times()
    return t.user + t.system


async def run(label: str, sb: Sandbox, per_call_params: bool) -> None:
    env, rs = envelope(), rules()
    assert sb.pid is not None
    await sb.evaluate(rs, {"n": -1}, env)  # warm the zygote
    lat = []
    cpu0, tree0 = own_cpu(), tree_cpu(sb.pid)
    for i in range(N):
        params = {"n": i} if per_call_params else {"n": -1}  # new params = new rule set
        t = time.perf_counter()
        res = await sb.evaluate(rs, params, env)
        lat.append((time.perf_counter() - t) * 1000)
        assert res.rule_index is None and not res.faults, res
    parent = (own_cpu() - cpu0) / N * 1000
    children = (tree_cpu(sb.pid) - tree0) / N * 1000
    lat.sort()
    print(
        f"{label:32s} p50 {statistics.median(lat):6.2f} ms  p99 {lat[int(N * 0.99) - 1]:6.2f} ms"
        f"  CPU/eval parent {parent:5.2f} ms + children {children:5.2f} ms"
        f" = {parent + children:5.2f} ms"
    )


HOSTILE = [
    'reduce range(40) as $i ("x"; . + .) | length > 0',  # memory doubling: the cap
    "def f: [f]; f",  # infinite recursion
    '"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!" | test("^(a+)+$")',  # regex
    "last(range(1e12)) > 0",  # a long loop
    ".source * 3e7 | length > 0",  # kills its evaluator
]


def evaluator_loop(n: int = 2000) -> None:
    """CPU per envelope of the evaluator's loop, in this process: rule by rule, and a sweep."""
    import mmap

    from switchboard_rules import protocol as wire
    from switchboard_rules import sandbox_child
    from switchboard_rules.reads import rule_set_reads
    from switchboard_rules.stage import _encoded

    exprs = [e for _, e in rules()]
    limits = Limits.from_config(DEFAULTS)
    cfg = wire.ChildConfig(
        memory_bytes=limits.memory_bytes,
        rule_ms=limits.rule_ms,
        compile_ms=limits.compile_ms,
        cache_size=limits.cache_size,
        parse_s_per_byte=0.25e-3 / 1024,
    )
    rule_set = sandbox_child.RuleSet(exprs, {}, cfg)
    env = _encoded(envelope(), rule_set_reads(tuple(exprs)))
    fd = os.open(os.devnull, os.O_WRONLY)
    page = mmap.mmap(-1, 4096)
    try:
        for label, sweep in (
            ("rule by rule", False),
            ("sweep", True),
            ("rule by rule", False),
            ("sweep", True),
        ):
            header = wire.EvalHeader(0, limits.event_ms, sweep=sweep)
            sandbox_child.evaluate_match(fd, header, env, rule_set, cfg, page)
            began = time.process_time()
            for _ in range(n):
                sandbox_child.evaluate_match(fd, header, env, rule_set, cfg, page)
            took = (time.process_time() - began) / n * 1e6
            print(
                f"evaluator loop, {label:12s} {took:6.1f} us CPU per envelope"
                f" ({len(env)} bytes: what the rules read)"
            )
    finally:
        os.close(fd)
        page.close()


async def hostile(sb: Sandbox, n: int) -> None:
    """``n`` hostile deliveries: each faults its own rule; memory before and after."""
    assert sb.pid is not None
    me = psutil.Process()

    def tree_pss() -> float:
        assert sb.pid is not None
        procs = [psutil.Process(sb.pid), *psutil.Process(sb.pid).children(recursive=True)]
        total = 0
        for proc in procs:
            try:
                total += proc.memory_full_info().pss
            except psutil.Error:
                pass
        return total / 2**20

    async def deliveries(count: int) -> dict[str, int]:
        causes: dict[str, int] = {}
        for k in range(count):
            rules = [("ok", "false"), ("bad", HOSTILE[k % len(HOSTILE)]), ("t", "true")]
            result = await sb.evaluate(rules, {}, envelope(), owner="h", scope="hostile")
            assert result.rule_index == 2 and [f.rule_index for f in result.faults] == [1]
            for f in result.faults:
                causes[f.cause] = causes.get(f.cause, 0) + 1
        return causes

    await deliveries(50)
    rss0, pss0 = me.memory_info().rss / 2**20, tree_pss()
    started = time.perf_counter()
    causes = await deliveries(n)
    took = time.perf_counter() - started
    rss1, pss1 = me.memory_info().rss / 2**20, tree_pss()
    print(f"{n} hostile deliveries in {took:.1f} s, faults {causes}")
    print(
        f"  server RSS {rss0:.1f} -> {rss1:.1f} MiB ({rss1 - rss0:+.1f}),"
        f" sandbox tree PSS {pss0:.1f} -> {pss1:.1f} MiB ({pss1 - pss0:+.1f})"
    )


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hostile", type=int, default=1000)
    args = ap.parse_args()
    evaluator_loop()
    print(f"32 rules, envelope {len(str(envelope()))} bytes, {N} sequential evaluations")
    sb = Sandbox(Limits.from_config(DEFAULTS))
    await sb.start()
    try:
        await run("warm zygote (compile once)", sb, per_call_params=False)
        await run("compile per call (new zygote)", sb, per_call_params=True)
        if args.hostile:
            await hostile(sb, args.hostile)
    finally:
        await sb.close()


if __name__ == "__main__":
    asyncio.run(main())
