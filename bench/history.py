"""History dry runs: events/s of a decision diff (and a lint) beside one live routing's cost.

Run: python bench/history.py [--events N] [--repeat R] [--mode diff|reroute|ingest] [--sandbox]
``--mode reroute`` and ``--mode ingest`` (bench/history_reroute.py): a re-route that
writes a todo per stored event, and live ingest beside it vs alone (the slowdown ratio).
Stores N (default 5000) ~5 KB deliveries on a webhook with 32 rules (none matching: every
event evaluates all of them), in process on an embedded PostgreSQL, then times, in the same
run: one delivery routed through the rules stage as a live delivery is (sequentially, the
sandbox warm), a diff of the saved rules against a candidate that changes one expression,
a diff against an identical candidate, and a lint. Prints events/s, the cost of a history
event as a fraction of a live routing, and this process's peak RSS before and after (the
events are streamed, so it should not grow with N). Per diff also: CPU per event of this
process and of the sandbox tree, this process's time in the garbage collector (a stall of
the one thread that feeds the sandbox) and the evaluators spawned or reused. The bench's
rules are simple comparisons, which the server decides itself in dry runs as in live
routing (``[plugins.rules] direct``); ``--sandbox`` sends every event to the sandbox.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import history_reroute  # noqa: E402
from harness import RULES, database, tree_cpu  # noqa: E402


def body(n: int) -> bytes:
    return json.dumps(
        {
            "action": "opened",
            "number": n,
            "repository": {"full_name": "org/app", "private": False},
            "pull_request": {
                f"field_{i}": {"value": "x" * 40, "n": i, "tags": ["a", "b"]} for i in range(55)
            },
        }
    ).encode()


def _cpu(rt: Any) -> tuple[float, float]:
    """CPU seconds of this process, and of the sandbox tree (everything it reaped too)."""
    import os

    t = os.times()
    pid = rt.registries.stages.get("rules").sandbox.pid
    return t.user + t.system, 0.0 if pid is None else tree_cpu(pid)


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def main(
    events: int, repeat: int, mode: str = "diff", concurrency: int = 8, sandbox: bool = False
) -> None:
    from switchboard import gctune
    from switchboard.config import load_config
    from switchboard.routing.replay import stored_envelope
    from switchboard.routing.route import config_of, grant_for, route
    from switchboard.runtime import Runtime
    from switchboard.service import history, identity, reroute, rules, webhooks
    from switchboard.service.ingest import ingest
    from switchboard.sources import Headers

    with database() as dsn, tempfile.TemporaryDirectory(prefix="sb-bench-") as tmp:
        config = Path(tmp) / "sb.toml"
        config.write_text(
            f"[plugins.rules]\nhistory_max_events = {events}\nhistory_deadline_s = 600\n"
            + ("direct = false\n" if sandbox else "")
        )
        env = {
            "SWITCHBOARD_DATABASE_URL": dsn,
            "SWITCHBOARD_DATA_DIR": tmp,
            "SWITCHBOARD_SECRET_KEY": "bench-secret-key-0123456789",
            "SWITCHBOARD_CONFIG": str(config),
        }
        rt = Runtime(load_config(env=env))
        await rt.open_store()
        try:
            await identity.add_human(rt, "bench")
            made = await identity.vend_endpoint(
                rt,
                owner="bench",
                name="owner",
                queues=["inbox"],
                webhook_queues=["inbox"],
                source_types=["generic"],
                webhook_max=2,
            )
            owner = await rt.store.get_endpoint(made["endpoint_id"])
            hook = await webhooks.create_webhook(rt, owner, "generic", "inbox")
            wid, token = hook["webhook_id"], hook["ingest_url"].rsplit("/", 1)[1]
            began = time.monotonic()
            for n in range(events):
                headers = Headers(
                    {
                        "X-Delivery-Id": f"d{n}",
                        "X-GitHub-Event": "pull_request",
                        "Content-Type": "application/json",
                    }
                )
                reply = await ingest(rt, token, headers, body(n), "application/json")
                assert reply.status == 202, reply.body
            print(
                f"stored {events} deliveries of {len(body(0))} bytes in"
                f" {time.monotonic() - began:.1f} s"
            )
            await rules.set_rules(rt, None, wid, RULES)
            # As a serve worker does once started (switchboard/app.py): what set-up made
            # lives on, frozen out of the collector's full walks, which a served re-route
            # or diff never pays for either.
            gctune.settle()
            if mode == "reroute":
                await history_reroute.reroute_mode(rt, wid, events)
                return
            if mode == "ingest":
                await history_reroute.ingest_mode(rt, owner, wid, events, body, concurrency)
                return

            # one live routing, the sandbox warm: the cost a delivery pays today
            resolved = await rt.store.resolve_webhook_by_id(wid)
            assert resolved is not None
            saved, grant = config_of(resolved), grant_for(resolved)
            rows = await rt.store.history_page(wid, limit=300)
            envs = [stored_envelope(rt.registries.projections, r, wid) for r in rows]
            for e in envs[:20]:
                await route(rt.stages, resolved, saved, e, grant, runtime=rt)
            began = time.monotonic()
            for e in envs:
                await route(rt.stages, resolved, saved, e, grant, runtime=rt)
            live_ms = (time.monotonic() - began) / len(envs) * 1000
            print(
                f"live routing, one delivery at a time: {live_ms:.2f} ms a delivery"
                f" ({1000 / live_ms:.0f}/s)"
            )

            changed = json.loads(json.dumps(RULES))
            changed[5]["expr"] = changed[5]["expr"].replace("repo-5", "repo-five")
            await history.diff_rules(rt, None, wid, rules=changed, last=200)  # warm
            gc_s = [0.0, 0.0]  # this process's garbage collections: time in them, and since

            def on_gc(phase: str, info: dict[str, int]) -> None:
                now = time.perf_counter()
                if phase == "start":
                    gc_s[1] = now
                else:
                    gc_s[0] += now - gc_s[1]

            gc.callbacks.append(on_gc)
            rss = peak_mib()
            for label, candidate in (
                ("diff, one rule changed", changed),
                ("diff, identical candidate", RULES),
            ):
                for _ in range(repeat):
                    cpu = _cpu(rt)
                    gc_s[0] = 0.0
                    sb = rt.registries.stages.get("rules").sandbox
                    stats0 = dict(sb.stats)
                    began = time.monotonic()
                    doc = await history.diff_rules(rt, None, wid, rules=candidate, last=events)
                    took = time.monotonic() - began
                    rate = doc["evaluated"] / took
                    own, sandbox = (b - a for a, b in zip(cpu, _cpu(rt), strict=True))
                    print(
                        f"  CPU per event: server {own / doc['evaluated'] * 1e6:.0f} us,"
                        f" sandbox {sandbox / doc['evaluated'] * 1e6:.0f} us;"
                        f" server GC {gc_s[0] * 1000:.0f} ms; evaluators"
                        + ", ".join(f" {k} {v - stats0[k]}" for k, v in sb.stats.items())
                    )
                    print(
                        f"{label}: {doc['evaluated']} events in {took:.2f} s ="
                        f" {rate:,.0f} events/s; a history event costs"
                        f" {1000 / rate / live_ms:.3f}x a live routing"
                        f" ({live_ms * rate / 1000:.1f} history events per live delivery);"
                        f" changed {doc['changed']}"
                    )
            for _ in range(repeat):
                began = time.monotonic()
                doc = await history.lint_rules(rt, None, wid, last=events)
                took = time.monotonic() - began
                print(
                    f"lint: {doc['evaluated']} events in {took:.2f} s ="
                    f" {doc['evaluated'] / took:,.0f} events/s,"
                    f" {len(doc['findings'])} findings"
                )
            # re-route under the changed rules: the plan, then applying it (new todos only)
            await rules.set_rules(rt, None, wid, changed)
            for plan in (True, False):
                began = time.monotonic()
                doc = await reroute.reroute_events(rt, None, wid, last=events, plan=plan)
                took = time.monotonic() - began
                made = doc["todos_planned"] if plan else doc["todos_created"]
                print(
                    f"reroute {'plan' if plan else 'apply'}: {doc['evaluated']} events in"
                    f" {took:.2f} s = {doc['evaluated'] / took:,.0f} events/s,"
                    f" changed {doc['changed']}, todos {made}"
                )
            print(
                f"peak RSS of this process: {rss:.0f} MiB before the timed runs,"
                f" {peak_mib():.0f} MiB after"
            )
        finally:
            await rt.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument(
        "--mode",
        choices=("diff", "reroute", "ingest"),
        default="diff",
        help="diff: the dry runs (default); reroute: an apply that writes; ingest: live"
        " ingest beside a re-route vs alone",
    )
    parser.add_argument(
        "--sandbox",
        action="store_true",
        help="every rule in the sandbox ([plugins.rules] direct = false), as before the"
        " server decided the bench's simple rules in dry runs too",
    )
    parser.add_argument(
        "--concurrency", type=int, default=8, help="live deliveries at once (--mode ingest)"
    )
    args = parser.parse_args()
    asyncio.run(main(args.events, args.repeat, args.mode, args.concurrency, args.sandbox))
