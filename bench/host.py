"""What this host charges for the things a delivery does besides our code: a figure per cost.

Run: python bench/host.py [--rounds N]
The end-to-end benches' ratios move between hosts of the same size (bench/README.md,
"seventh pass"): a delivery sleeps and wakes two or three times (the request, the
database's answer, the rules sandbox's), and what a sleep costs is the host's. This prints,
each a median of three rounds:

- a system call (``os.getpid``), ns;
- a round trip to another process over a Unix socket pair (the transport of PostgreSQL's
  connections and of the rules sandbox): wall time and this process's CPU per round trip,
  with the two processes free to run on either CPU, then both pinned to one;
- an 8 KiB ``fdatasync`` in the working directory (a commit's WAL flush), µs;
- the wake-up tax: the CPU of one fixed piece of Python work (a JSON document dumped and
  read back, about what a delivery's envelope costs) run back to back, then after a 0.5 ms
  and a 2 ms sleep each time. A process that slept finds its caches cold; the ratio is
  what a worker that waits between deliveries pays on this host for the same code.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import socket
import statistics
import tempfile
import time
from collections.abc import Callable

_DOC = {"items": [{"k": i, "v": str(i) * 5, "n": {"x": i / 3}} for i in range(60)]}


def syscall_ns(n: int = 200_000) -> float:
    t = time.perf_counter()
    for _ in range(n):
        os.getpid()
    return (time.perf_counter() - t) / n * 1e9


def round_trip(pinned: bool, n: int = 10_000) -> tuple[float, float]:
    """(wall µs, this process's CPU µs) per round trip of a 1 KiB message to a child."""
    mine, theirs = socket.socketpair()
    cpus = sorted(os.sched_getaffinity(0))
    pid = os.fork()
    if pid == 0:  # the peer: answers each message
        mine.close()
        if pinned:
            os.sched_setaffinity(0, cpus[:1])
        for _ in range(n):
            theirs.recv(65536)
            theirs.send(b"k")
        os._exit(0)
    theirs.close()
    before = os.sched_getaffinity(0)
    if pinned:
        os.sched_setaffinity(0, cpus[:1])
    msg = b"x" * 1024
    try:
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(n):
            mine.send(msg)
            mine.recv(16)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        os.sched_setaffinity(0, before)
        os.waitpid(pid, 0)
        mine.close()
    return wall / n * 1e6, cpu / n * 1e6


def fdatasync_us(n: int = 300) -> float:
    with tempfile.NamedTemporaryFile(dir=".", prefix=".host-bench-") as f:
        block = b"x" * 8192
        t = time.perf_counter()
        for _ in range(n):
            os.pwrite(f.fileno(), block, 0)
            os.fdatasync(f.fileno())
        return (time.perf_counter() - t) / n * 1e6


def _job() -> None:
    json.loads(json.dumps(_DOC))


def job_cpu_us(sleep_s: float, n: int = 2000) -> float:
    """The CPU of ``_job`` alone (this thread's), each run after sleeping ``sleep_s``."""
    total = 0.0
    for _ in range(n):
        if sleep_s:
            time.sleep(sleep_s)
        t = time.thread_time()
        _job()
        total += time.thread_time() - t
    return total / n * 1e6


def median(rounds: int, f: Callable[[], float]) -> float:
    return statistics.median(f() for _ in range(rounds))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    r = ap.parse_args().rounds
    for _ in range(300):
        _job()  # warm
    print(f"host: {os.cpu_count()} CPU(s), {len(os.sched_getaffinity(0))} usable")
    print(f"system call (getpid):            {median(r, syscall_ns):8.0f} ns")
    for pinned in (False, True):
        walls, cpus = zip(*(round_trip(pinned) for _ in range(r)), strict=True)
        where = "both on one CPU " if pinned else "free to use both"
        print(
            f"socket round trip, {where}: {statistics.median(walls):6.1f} µs wall,"
            f" {statistics.median(cpus):5.1f} µs CPU of this side"
        )
    print(f"8 KiB write + fdatasync:         {median(r, fdatasync_us):8.0f} µs")
    warm = median(r, lambda: job_cpu_us(0.0))
    for sleep_ms in (0.5, 2.0):
        cold = median(r, functools.partial(job_cpu_us, sleep_ms / 1000))
        print(
            f"wake-up tax, {sleep_ms:3.1f} ms asleep before:   {cold:6.1f} µs CPU against"
            f" {warm:.1f} back to back: {cold / warm:.2f} ×"
        )


if __name__ == "__main__":
    main()
