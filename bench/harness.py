"""Shared benchmark plumbing: a database, a served instance, and a keep-alive load client."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

SWITCHBOARD = str(Path(sys.executable).with_name("switchboard"))


@contextlib.contextmanager
def database() -> Iterator[str]:
    """SWITCHBOARD_DATABASE_URL when set, else a throwaway embedded PostgreSQL."""
    if os.environ.get("SWITCHBOARD_DATABASE_URL"):
        yield os.environ["SWITCHBOARD_DATABASE_URL"]
        return
    with tempfile.TemporaryDirectory(prefix="sb-bench-") as tmp:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pgserver

            server = pgserver.get_server(Path(tmp) / "pg", cleanup_mode="stop")
        try:
            yield str(server.get_uri())
        finally:
            server.cleanup()


def tree_cpu(pid: int) -> float:
    """CPU seconds of process ``pid`` and all its descendants, with everything they reaped."""
    import psutil

    root = psutil.Process(pid)
    total = 0.0
    for proc in [root, *root.children(recursive=True)]:
        try:
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass  # exited meanwhile
    return total


def py_spy() -> str:
    """The py-spy to sample with: on PATH, else the virtualenv's own (run as .venv/bin/python)."""
    spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if spy is None:
        raise SystemExit("py-spy is not installed: pip install -e .[bench]")
    return spy


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Served:
    proc: subprocess.Popen[bytes]
    base_url: str
    env: dict[str, str]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def serve(
    dsn: str,
    data_dir: Path,
    workers: int | None = 1,
    config: Path | None = None,
    log: Path | None = None,
) -> Served:
    """``switchboard serve`` on a free port; ``workers=None``: serve's own default (auto);
    ``log``: its output (JSON lines: not a terminal) to that file, else discarded."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
    env.update(
        SWITCHBOARD_DATABASE_URL=dsn,
        SWITCHBOARD_DATA_DIR=str(data_dir),
        SWITCHBOARD_BASE_URL=f"http://127.0.0.1:{port}",
        SWITCHBOARD_SECRET_KEY="bench-secret-key-0123456789",
    )
    if config is None and os.environ.get("BENCH_CONFIG"):
        config = Path(os.environ["BENCH_CONFIG"])
    if config is not None:
        env["SWITCHBOARD_CONFIG"] = str(config)
    flags = ["--workers", str(workers)] if workers is not None else []
    proc = subprocess.Popen(
        [SWITCHBOARD, "serve", "--port", str(port), *flags],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL if log is None else log.open("wb"),
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base)
    except SystemExit:
        proc.kill()
        raise
    return Served(proc, base, env)


def wait_healthy(base: str) -> None:
    """Until ``base``/healthz answers (30 s at most)."""
    for _ in range(300):
        try:
            with urllib.request.urlopen(base + "/healthz", timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"server at {base} did not start")


def cli(env: dict[str, str], *args: str) -> Any:
    import json

    out = subprocess.run([SWITCHBOARD, *args], env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def generic_webhook(env: dict[str, str], name: str = "b", webhook_queues: str = "inbox") -> Any:
    """An endpoint ``name`` of the human ``bench`` (added first) that drains ``inbox`` and may
    own one generic webhook in ``webhook_queues``, and that webhook: ``create``'s answer
    with the endpoint's ``endpoint_id``."""
    ep = cli(
        env, "endpoint", "vend", "--owner", "bench", "--name", name,
        "--queues", "inbox", "--webhook-queues", webhook_queues,
        "--source-types", "generic", "--webhook-max", "1",
    )  # fmt: skip
    hook = cli(
        env, "webhook", "create", "--endpoint", ep["endpoint_id"],
        "--source", "generic", "--target-queue", "inbox",
    )  # fmt: skip
    return {**hook, "endpoint_id": ep["endpoint_id"]}


async def _exchange(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    host: str,
    path: str,
    delivery_id: str,
    headers: str,
    body: bytes,
) -> tuple[bytes, bytes]:
    """One keep-alive POST of ``body``: the status line and the reply's body."""
    writer.write(
        (
            f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"X-Delivery-Id: {delivery_id}\r\n{headers}"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        + body
    )
    status = await reader.readline()
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return status, await reader.readexactly(length)


async def _client(
    host: str,
    port: int,
    path: str,
    bodies: asyncio.Queue[bytes],
    latencies: list[float],
    headers: str,
) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    await drive(reader, writer, host, path, bodies, latencies, headers)


async def drive(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    host: str,
    path: str,
    bodies: asyncio.Queue[bytes],
    latencies: list[float],
    headers: str = "",
) -> None:
    """POST the queue's bodies over one open keep-alive connection until it is empty, then
    close it; each exchange's time into ``latencies``."""
    try:
        while True:
            try:
                body = bodies.get_nowait()
            except asyncio.QueueEmpty:
                return
            start = time.perf_counter()
            status, _ = await _exchange(
                reader, writer, host, path, str(uuid.uuid4()), headers, body
            )
            latencies.append(time.perf_counter() - start)
            if b" 202 " not in status:
                raise RuntimeError(f"unexpected status {status!r}")
    finally:
        writer.close()


async def load(
    url: str, body: bytes, concurrency: int, total: int, headers: str = ""
) -> tuple[float, list[float]]:
    """POST ``total`` unique deliveries over ``concurrency`` keep-alive connections."""
    parts = urlsplit(url)
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    for _ in range(total):
        queue.put_nowait(body)
    latencies: list[float] = []
    start = time.perf_counter()
    await asyncio.gather(
        *[
            _client(
                parts.hostname or "127.0.0.1",
                parts.port or 80,
                parts.path,
                queue,
                latencies,
                headers,
            )
            for _ in range(concurrency)
        ]
    )
    return time.perf_counter() - start, latencies


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def summary(elapsed: float, lat: list[float]) -> dict[str, float]:
    return {
        "per_s": len(lat) / elapsed,
        "p50_ms": pct(lat, 50) * 1000,
        "p99_ms": pct(lat, 99) * 1000,
        "mean_ms": statistics.fmean(lat) * 1000,
    }


# 32 realistic rules, none of which matches a bench body: every delivery evaluates them all.
RULES = [
    {
        "id": f"r{i}",
        "name": f"repo {i}",
        "expr": f'.kind == "pull_request" and .payload.repository.full_name == "org/repo-{i}"'
        f' and (.headers["x-github-event"] // "") != "ping"',
        "action": {"queue": "inbox"},
    }
    for i in range(32)
]


# -- pgbench: the database's own ceiling ----------------------------------------------------


def pgbench_binary() -> str:
    """The pgbench beside the embedded server's binaries (the same build), else on PATH."""
    try:
        import pgserver

        bundled = Path(pgserver.__file__).parent / "pginstall" / "bin" / "pgbench"
        if bundled.exists():
            return str(bundled)
    except ImportError:
        pass
    found = shutil.which("pgbench")
    if found is None:
        raise SystemExit("pgbench not found (neither in pgserver's pginstall nor on PATH)")
    return found


@dataclass
class PgbenchResult:
    tps: float
    latency_ms: float | None  # pgbench's "latency average"
    transactions: int
    failed: int


def pgbench(dsn: str, script: str, clients: int, seconds: float, threads: int = 2) -> PgbenchResult:
    """Run the custom ``script`` (no vacuum, prepared statements) against ``dsn`` for
    ``seconds`` at ``clients`` connections; the tps without the initial connection time.

    The DSN goes in as the database name: libpq takes a connection string there.
    """
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as fh:
        fh.write(script)
    try:
        out = subprocess.run(
            [
                pgbench_binary(),
                "-n",
                "-M",
                "prepared",
                "-c",
                str(clients),
                "-j",
                str(threads),
                "-T",
                str(max(1, round(seconds))),
                "-f",
                fh.name,
                dsn,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        os.unlink(fh.name)
    tps = re.search(r"^tps = ([0-9.]+)", out.stdout, re.M)
    if out.returncode != 0 or tps is None:
        raise RuntimeError(f"pgbench failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    latency = re.search(r"^latency average = ([0-9.]+) ms", out.stdout, re.M)
    done = re.search(r"^number of transactions actually processed: (\d+)", out.stdout, re.M)
    failed = re.search(r"^number of failed transactions: (\d+)", out.stdout, re.M)
    return PgbenchResult(
        float(tps.group(1)),
        float(latency.group(1)) if latency else None,
        int(done.group(1)) if done else 0,
        int(failed.group(1)) if failed else 0,
    )


# -- /metrics: batch sizes -------------------------------------------------------------------

#: Cumulative bucket counts by upper bound, then the count and the sum, per step.
Histogram = dict[str, tuple[dict[float, float], float, float]]


def scrape_histogram(
    base_url: str, family: str = "switchboard_store_batch_size", label: str = "step"
) -> Histogram:
    """One histogram family from ``base_url``'s /metrics, by the value of ``label``."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(base_url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: Histogram = {}
    for fam in text_string_to_metric_families(text):
        if fam.name != family:
            continue
        for sample in fam.samples:
            key = sample.labels.get(label, "")
            buckets, count, total = out.get(key, ({}, 0.0, 0.0))
            if sample.name.endswith("_bucket"):
                buckets[float(sample.labels["le"])] = sample.value
            elif sample.name.endswith("_count"):
                count = sample.value
            elif sample.name.endswith("_sum"):
                total = sample.value
            out[key] = (buckets, count, total)
    return out


def histogram_diff(before: Histogram, after: Histogram) -> Histogram:
    """What was observed between two scrapes (cumulative counters subtracted)."""
    diff: Histogram = {}
    for key, (buckets, count, total) in after.items():
        b0, c0, t0 = before.get(key, ({}, 0.0, 0.0))
        diff[key] = ({le: n - b0.get(le, 0.0) for le, n in buckets.items()}, count - c0, total - t0)
    return diff


def histogram_percentiles(
    buckets: dict[float, float], count: float, ps: tuple[float, ...] = (50, 90, 99, 100)
) -> list[float]:
    """For each p, the upper bound of the bucket holding the p-th percentile (100: the
    max's bucket); nan without observations."""
    out = []
    for p in ps:
        if count <= 0:
            out.append(float("nan"))
            continue
        rank = p / 100 * count
        out.append(
            next((le for le, n in sorted(buckets.items()) if n >= rank - 1e-9), float("inf"))
        )
    return out


def batch_line(diff: Histogram, step: str) -> str:
    """``write: n 1234, mean 5.1, p50 ≤4 p90 ≤8 p99 ≤16 max ≤16`` for one step."""
    buckets, count, total = diff.get(step, ({}, 0.0, 0.0))
    if count <= 0:
        return f"{step}: no batches"
    p50, p90, p99, top = histogram_percentiles(buckets, count)

    def le(v: float) -> str:
        return "≤" + (f"{v:g}" if v != float("inf") else "inf")

    return (
        f"{step}: {count:.0f} batches, mean {total / count:.1f},"
        f" p50 {le(p50)} p90 {le(p90)} p99 {le(p99)} max {le(top)}"
    )


# -- delivery-id load: redeliveries on purpose ---------------------------------------------


async def _id_client(
    host: str,
    port: int,
    path: str,
    ids: asyncio.Queue[str],
    body: Callable[[str], bytes],
    answers: list[tuple[str, int, dict[str, Any], float]],
) -> None:
    import json

    reader, writer = await asyncio.open_connection(host, port)
    try:
        while True:
            try:
                did = ids.get_nowait()
            except asyncio.QueueEmpty:
                return
            start = time.perf_counter()
            status, reply = await _exchange(reader, writer, host, path, did, "", body(did))
            answers.append(
                (
                    did,
                    int(status.split()[1]),
                    json.loads(reply or b"{}"),
                    time.perf_counter() - start,
                )
            )
    finally:
        writer.close()


async def load_ids(
    url: str, ids: list[str], concurrency: int, body: Callable[[str], bytes]
) -> tuple[float, list[tuple[str, int, dict[str, Any], float]]]:
    """POST one delivery per entry of ``ids`` (its ``X-Delivery-Id``; an id listed twice is
    a redelivery) over ``concurrency`` keep-alive connections, in list order; each answer
    as (id, status, JSON body, seconds)."""
    parts = urlsplit(url)
    queue: asyncio.Queue[str] = asyncio.Queue()
    for did in ids:
        queue.put_nowait(did)
    answers: list[tuple[str, int, dict[str, Any], float]] = []
    start = time.perf_counter()
    await asyncio.gather(
        *[
            _id_client(
                parts.hostname or "127.0.0.1", parts.port or 80, parts.path, queue, body, answers
            )
            for _ in range(concurrency)
        ]
    )
    return time.perf_counter() - start, answers
