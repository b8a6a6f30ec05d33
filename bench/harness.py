"""Shared benchmark plumbing: a database, a served instance, and a keep-alive load client."""

from __future__ import annotations

import asyncio
import contextlib
import os
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


def serve(dsn: str, data_dir: Path, workers: int = 1, config: Path | None = None) -> Served:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
    env.update(SWITCHBOARD_DATABASE_URL=dsn, SWITCHBOARD_DATA_DIR=str(data_dir),
               SWITCHBOARD_BASE_URL=f"http://127.0.0.1:{port}",
               SWITCHBOARD_SECRET_KEY="bench-secret-key-0123456789")
    if config is not None:
        env["SWITCHBOARD_CONFIG"] = str(config)
    proc = subprocess.Popen([SWITCHBOARD, "serve", "--port", str(port), "--workers", str(workers)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            with urllib.request.urlopen(base + "/healthz", timeout=1):
                return Served(proc, base, env)
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("server did not start")


def cli(env: dict[str, str], *args: str) -> Any:
    import json

    out = subprocess.run([SWITCHBOARD, *args], env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


async def _client(host: str, port: int, path: str, bodies: asyncio.Queue[bytes],
                  latencies: list[float], headers: str) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        while True:
            try:
                body = bodies.get_nowait()
            except asyncio.QueueEmpty:
                return
            req = (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                   f"X-Delivery-Id: {uuid.uuid4()}\r\n{headers}"
                   f"Content-Length: {len(body)}\r\n\r\n").encode() + body
            start = time.perf_counter()
            writer.write(req)
            status = await reader.readline()
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            await reader.readexactly(length)
            latencies.append(time.perf_counter() - start)
            if b" 202 " not in status:
                raise RuntimeError(f"unexpected status {status!r}")
    finally:
        writer.close()


async def load(url: str, body: bytes, concurrency: int, total: int,
               headers: str = "") -> tuple[float, list[float]]:
    """POST ``total`` unique deliveries over ``concurrency`` keep-alive connections."""
    parts = urlsplit(url)
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    for _ in range(total):
        queue.put_nowait(body)
    latencies: list[float] = []
    start = time.perf_counter()
    await asyncio.gather(*[
        _client(parts.hostname or "127.0.0.1", parts.port or 80, parts.path, queue, latencies,
                headers)
        for _ in range(concurrency)
    ])
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
    {"id": f"r{i}", "name": f"repo {i}",
     "expr": f'.kind == "pull_request" and .payload.repository.full_name == "org/repo-{i}"'
             f' and (.headers["x-github-event"] // "") != "ping"',
     "action": {"queue": "inbox"}}
    for i in range(32)
]


async def _id_client(host: str, port: int, path: str, ids: asyncio.Queue[str],
                     body: Callable[[str], bytes],
                     answers: list[tuple[str, int, dict[str, Any], float]]) -> None:
    import json

    reader, writer = await asyncio.open_connection(host, port)
    try:
        while True:
            try:
                did = ids.get_nowait()
            except asyncio.QueueEmpty:
                return
            data = body(did)
            req = (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                   f"X-Delivery-Id: {did}\r\nContent-Length: {len(data)}\r\n\r\n").encode() + data
            start = time.perf_counter()
            writer.write(req)
            status = await reader.readline()
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            reply = await reader.readexactly(length)
            answers.append((did, int(status.split()[1]), json.loads(reply or b"{}"),
                            time.perf_counter() - start))
    finally:
        writer.close()


async def load_ids(url: str, ids: list[str], concurrency: int,
                   body: Callable[[str], bytes]) -> tuple[float,
                                                          list[tuple[str, int, dict[str, Any],
                                                                     float]]]:
    """POST one delivery per entry of ``ids`` (its ``X-Delivery-Id``; an id listed twice is
    a redelivery) over ``concurrency`` keep-alive connections, in list order; each answer
    as (id, status, JSON body, seconds)."""
    parts = urlsplit(url)
    queue: asyncio.Queue[str] = asyncio.Queue()
    for did in ids:
        queue.put_nowait(did)
    answers: list[tuple[str, int, dict[str, Any], float]] = []
    start = time.perf_counter()
    await asyncio.gather(*[
        _id_client(parts.hostname or "127.0.0.1", parts.port or 80, parts.path, queue, body,
                   answers)
        for _ in range(concurrency)
    ])
    return time.perf_counter() - start, answers


def histogram(metrics: str, name: str, labels: str) -> list[tuple[float, float]]:
    """The cumulative buckets ``(le, count)`` of ``name{labels,le=...}`` in a scrape."""
    import re

    found = re.findall(rf'^{name}_bucket\{{(?:{labels},le="([^"]+)"|le="([^"]+)",{labels})\}}'
                       rf' (\S+)$', metrics, re.M)
    return sorted((float(a or b), float(c)) for a, b, c in found)


def bucket_pct(buckets: list[tuple[float, float]], p: float) -> float:
    """The upper bound of the bucket holding the ``p``-th percentile (inf: past the last)."""
    total = buckets[-1][1] if buckets else 0.0
    for le, count in buckets:
        if total and count >= p / 100 * total:
            return le
    return float("nan")
