"""Where the two cores go while the receiver is under load: each process's share, per delivery.

Run: python bench/cores.py [--total N] [--clients C] [--workers W] [--body small|5k]
[--spread MS] [--writes-in-flight F]
Starts `switchboard serve` (serve's own worker count unless --workers) on an embedded
PostgreSQL with one generic webhook (no rules), opens C keep-alive connections (all at once,
as ingest.py's client does; with --spread, one every MS milliseconds, which lets the kernel
hand them to different workers) and sends N unique deliveries over them from a uvloop
client (``[ingest] writes_in_flight = F`` in serve's config with the option). Prints, per
delivery: each serve process's CPU, its sleeps (voluntary context
switches: waits for a request or for the database) and preemptions (involuntary ones), and
how many of the connections it holds; PostgreSQL's CPU (all its processes); the load
client's own CPU; how busy the machine was (/proc/stat, in cores); PostgreSQL's WAL flushes
(`pg_stat_wal`, with `track_wal_io_timing` on: how many a delivery, how long each) and the
write batches (the server's /metrics). It answers what ingest.py's ratio alone cannot: is
the receiver short of CPU, of cores it can use, or waiting for commits.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil
import psycopg

sys.path.insert(0, str(Path(__file__).parent))
from harness import (  # noqa: E402
    batch_line,
    cli,
    database,
    drive,
    generic_webhook,
    histogram_diff,
    scrape_histogram,
    serve,
    summary,
)
from ingest import BODY as BODY_SMALL  # noqa: E402
from profile_ingest import workers  # noqa: E402
from routing import BODY as BODY_5K  # noqa: E402


async def _load(
    url: str, body: bytes, clients: int, total: int, spread_s: float, opened: Callable[[], Any]
) -> tuple[Any, float, list[float]]:
    """Open ``clients`` connections ``spread_s`` apart, call ``opened`` once every one is
    accepted, then POST ``total`` deliveries over them: (what ``opened`` returned, the
    seconds the deliveries took, their latencies)."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    conns = []
    for _ in range(clients):
        conns.append(await asyncio.open_connection(host, port))
        if spread_s:
            await asyncio.sleep(spread_s)
    await asyncio.sleep(0.2)  # every connection accepted before the count and the run
    taken = opened()
    bodies: asyncio.Queue[bytes] = asyncio.Queue()
    for _ in range(total):
        bodies.put_nowait(body)
    latencies: list[float] = []
    start = time.perf_counter()
    await asyncio.gather(*(drive(r, w, host, parts.path, bodies, latencies) for r, w in conns))
    return taken, time.perf_counter() - start, latencies


def _postgres(dsn: str) -> list[psutil.Process]:
    """The embedded server's processes (its socket directory is in their command line), or
    every process named postgres for a database elsewhere."""
    host = psycopg.conninfo.conninfo_to_dict(dsn).get("host") or ""
    found = [p for p in psutil.process_iter(["name", "cmdline"]) if p.info["name"] == "postgres"]
    mine = [p for p in found if host and any(host in a for a in p.info["cmdline"] or [])]
    if not mine:
        return found
    return [*mine, *(c for p in mine for c in p.children(recursive=True))]


def _times(procs: list[psutil.Process]) -> dict[int, tuple[float, float, int, int]]:
    """Per process: user and system CPU seconds, voluntary and involuntary switches."""
    out = {}
    for proc in procs:
        try:
            t, c = proc.cpu_times(), proc.num_ctx_switches()
            out[proc.pid] = (t.user, t.system, c.voluntary, c.involuntary)
        except psutil.Error:
            out[proc.pid] = (0.0, 0.0, 0, 0)
    return out


def _stat() -> list[int]:
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:]]


def _held(procs: list[psutil.Process], port: int) -> dict[int, int]:
    held = {}
    for proc in procs:
        try:
            conns = proc.net_connections("tcp")
        except psutil.Error:
            conns = []
        held[proc.pid] = sum(1 for c in conns if c.status == "ESTABLISHED" and c.laddr.port == port)
    return held


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--total", type=int, default=6000)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--workers", type=int, default=None, help="default: serve's own (auto)")
    ap.add_argument("--body", choices=("small", "5k"), default="small")
    ap.add_argument("--spread", type=float, default=0.0, help="ms between opening connections")
    ap.add_argument("--writes-in-flight", type=int, default=None, help="[ingest] writes_in_flight")
    args = ap.parse_args()
    import uvloop

    body = BODY_SMALL if args.body == "small" else BODY_5K
    with database() as dsn, tempfile.TemporaryDirectory() as tmp:
        config = None
        if args.writes_in_flight is not None:
            config = Path(tmp) / "sb.toml"
            config.write_text(f"[ingest]\nwrites_in_flight = {args.writes_in_flight}\n")
        srv = serve(dsn, Path(tmp), workers=args.workers, config=config)
        try:
            cli(srv.env, "human", "add", "bench")
            hook = generic_webhook(srv.env)
            url = hook["ingest_url"]
            port = urlsplit(url).port or 80
            spread = args.spread / 1e3
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("ALTER SYSTEM SET track_wal_io_timing = on")
                conn.execute("SELECT pg_reload_conf()")
            uvloop.run(_load(url, body, args.clients, 500, spread, lambda: None))  # warm up
            answering = workers(srv.proc.pid)
            pg = _postgres(dsn)

            def opened() -> Any:
                return (
                    _held(answering, port),
                    _times(answering + pg),
                    _stat(),
                    resource.getrusage(resource.RUSAGE_SELF),
                )

            batches = scrape_histogram(srv.base_url)
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("SELECT pg_stat_reset_shared('wal')")
            (held, before, stat0, self0), elapsed, latencies = uvloop.run(
                _load(url, body, args.clients, args.total, spread, opened)
            )
            client = resource.getrusage(resource.RUSAGE_SELF)
            stat = [b - a for a, b in zip(stat0, _stat(), strict=False)]
            after = _times(answering + pg)
            with psycopg.connect(dsn, autocommit=True) as conn:
                wal = conn.execute("SELECT wal_sync, wal_sync_time FROM pg_stat_wal").fetchone()
            batches = histogram_diff(batches, scrape_histogram(srv.base_url))
        finally:
            srv.stop()
    n = args.total
    s = summary(elapsed, latencies)
    busy = (sum(stat[:8]) - stat[3] - stat[4]) / max(1, sum(stat[:8])) * psutil.cpu_count()
    print(
        f"cores.py: {n} deliveries, {args.clients} clients, body {len(body)} B,"
        f" {len(answering)} answering process(es), connections opened"
        + (f" {args.spread:g} ms apart" if args.spread else " at once")
        + (f", writes_in_flight {args.writes_in_flight}" if args.writes_in_flight else "")
    )
    print(
        f"{s['per_s']:,.0f} deliveries/s, p50 {s['p50_ms']:.2f} ms;"
        f" the machine busy {busy:.2f} of {psutil.cpu_count()} cores"
    )
    print(
        f"{'per delivery':<16} {'conns':>5} {'CPU µs':>7} {'of it system':>12}"
        f" {'sleeps':>7} {'preempted':>9}"
    )
    for proc in answering:
        (u0, s0, v0, i0), (u1, s1, v1, i1) = before[proc.pid], after[proc.pid]
        if u1 + s1 - u0 - s0 < 0.001 and not held.get(proc.pid):
            continue  # Sanic's manager, the resource tracker: idle
        print(
            f"{'worker ' + str(proc.pid):<16} {held.get(proc.pid, 0):>5}"
            f" {(u1 + s1 - u0 - s0) / n * 1e6:>7.0f} {(s1 - s0) / n * 1e6:>12.0f}"
            f" {(v1 - v0) / n:>7.2f} {(i1 - i0) / n:>9.2f}"
        )
    pg_user = sum(after[p.pid][0] - before[p.pid][0] for p in pg)
    pg_sys = sum(after[p.pid][1] - before[p.pid][1] for p in pg)
    print(
        f"{'postgres (all)':<16} {'':>5} {(pg_user + pg_sys) / n * 1e6:>7.0f}"
        f" {pg_sys / n * 1e6:>12.0f}"
    )
    own = client.ru_utime + client.ru_stime - self0.ru_utime - self0.ru_stime
    print(
        f"{'load client':<16} {'':>5} {own / n * 1e6:>7.0f}"
        f" {(client.ru_stime - self0.ru_stime) / n * 1e6:>12.0f}"
    )
    if wal is not None and wal[0]:
        print(
            f"WAL flushes: {wal[0] / n:.3f} a delivery, {wal[1] / wal[0]:.2f} ms each"
            f" ({wal[0]} in the run)"
        )
    print(batch_line(batches, "write"))


if __name__ == "__main__":
    main()
