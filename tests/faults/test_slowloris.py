"""Slowloris: a client trickling its headers or its body one byte a second is cut at a
total deadline (not an inactivity timer each byte resets), and other clients stay fast."""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from sbfaults import crawl

HEADER_S = 2.0
BODY_S = 3.0
#: Crawling connections of each kind at once.
CRAWLERS = 20


def _latencies(url: str, n: int) -> list[float]:
    out = []
    with httpx.Client(timeout=10) as http:
        for _ in range(n):
            started = time.monotonic()
            assert http.get(url).status_code == 200
            out.append(time.monotonic() - started)
    return out


@pytest.mark.slow
def test_trickled_headers_and_bodies_are_cut_at_their_deadlines(
    server_factory: Any, dsn: str, fault_config: Any
) -> None:
    config = fault_config(
        f"[server]\nheader_timeout_ms = {int(HEADER_S * 1000)}\n"
        f"body_timeout_ms = {int(BODY_S * 1000)}\n"
    )
    srv = server_factory(dsn, config=config)
    health = srv.base_url + "/healthz"
    quiet = _latencies(health, 30)

    head = b"POST /webhooks/w/" + b"0" * 48 + b" HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 40
    # Whole headers at once, then a 60-byte body a byte a second.
    body_first = b"POST /webhooks/w/" + b"0" * 48 + b" HTTP/1.1\r\nHost: x\r\n"
    body_first += b"Content-Length: 60\r\n\r\n"

    def trickle_head() -> tuple[float, bytes, bool]:
        return crawl(srv.port, head, every=1.0, limit=20)

    def trickle_body() -> tuple[float, bytes, bool]:
        return crawl(srv.port, body_first + b"x" * 60, every=1.0, limit=20, burst=len(body_first))

    with ThreadPoolExecutor(2 * CRAWLERS + 1) as pool:
        heads = [pool.submit(trickle_head) for _ in range(CRAWLERS)]
        bodies = [pool.submit(trickle_body) for _ in range(CRAWLERS)]
        time.sleep(0.5)
        loaded = pool.submit(_latencies, health, 30).result()
        head_results = [f.result() for f in heads]
        body_results = [f.result() for f in bodies]

    for seconds, got, closed in head_results:
        assert closed and got.startswith(b"HTTP/1.1 408 "), (seconds, got[:100])
        assert HEADER_S - 0.1 < seconds < HEADER_S + 1.0, seconds
    for seconds, got, closed in body_results:
        assert closed and got.startswith(b"HTTP/1.1 408 "), (seconds, got[:100])
        assert BODY_S - 0.1 < seconds < BODY_S + 1.0, seconds
    # The crawlers cost the plain client nothing it would notice.
    assert max(loaded) < 0.5, loaded
    print(
        f"\nslowloris, {CRAWLERS} + {CRAWLERS} crawlers at 1 byte/s: headers cut at"
        f" {max(s for s, _, _ in head_results):.2f} s (deadline {HEADER_S} s), bodies at"
        f" {max(s for s, _, _ in body_results):.2f} s (deadline {BODY_S} s); plain client"
        f" median {statistics.median(quiet) * 1000:.1f} ms alone,"
        f" {statistics.median(loaded) * 1000:.1f} ms (max {max(loaded) * 1000:.1f}) beside them"
    )


#: The issue's flood: this many connections, each a byte every :data:`FLOOD_EVERY_S`.
FLOOD = 1000
FLOOD_EVERY_S = 5.0


async def _crawl_async(port: int, data: bytes, every: float, limit: float) -> tuple[float, bool]:
    """One connection trickling ``data`` a byte each ``every`` s: (seconds until the server
    closed it, whether it answered 408 first)."""
    import asyncio

    started = time.monotonic()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    got = b""

    async def feed() -> None:
        for byte in data:
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(every)

    feeding = asyncio.create_task(feed())
    try:
        async with asyncio.timeout(limit):
            while chunk := await reader.read(4096):
                got += chunk
    except (TimeoutError, ConnectionError):
        pass
    finally:
        feeding.cancel()
        writer.close()
    return time.monotonic() - started, got.startswith(b"HTTP/1.1 408 ")


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * (len(ordered) - 1) + 0.5))]


@pytest.mark.slow
def test_a_thousand_crawlers_are_all_cut_and_a_plain_client_barely_notices(
    server_factory: Any, dsn: str, fault_config: Any
) -> None:
    import asyncio

    # No per-client cap here: every crawler is let in, so each must be cut by the deadline.
    config = fault_config(
        f"[server]\nheader_timeout_ms = {int(HEADER_S * 1000)}\nmax_connections_per_client = 0\n"
    )
    srv = server_factory(dsn, config=config)
    health = srv.base_url + "/healthz"
    quiet = _latencies(health, 100)
    head = b"POST /webhooks/w/" + b"0" * 48 + b" HTTP/1.1\r\nHost: x\r\n"

    async def flood() -> list[tuple[float, bool]]:
        return await asyncio.gather(
            *[_crawl_async(srv.port, head, FLOOD_EVERY_S, 30) for _ in range(FLOOD)]
        )

    with ThreadPoolExecutor(2) as pool:
        crawlers = pool.submit(asyncio.run, flood())
        time.sleep(1.0)  # the flood is connected and trickling
        loaded = pool.submit(_latencies, health, 100).result()
        results = crawlers.result()

    cut = [s for s, answered in results if answered]
    assert len(cut) == FLOOD, f"{FLOOD - len(cut)} crawlers were not answered 408"
    assert max(cut) < HEADER_S + 2.0, max(cut)
    quiet_p99, loaded_p99 = _p99(quiet), _p99(loaded)
    # The bound (within 2x the unloaded p99), with a few ms of slack for the
    # scheduling noise of a loaded two-core machine running the suite in parallel.
    assert loaded_p99 <= 2 * quiet_p99 + 0.010, (quiet_p99, loaded_p99)
    print(
        f"\nslowloris flood: {FLOOD} connections, a byte every {FLOOD_EVERY_S:.0f} s, all cut"
        f" with 408 by {max(cut):.2f} s (header_timeout_ms {int(HEADER_S * 1000)}); a plain"
        f" client's p99 {quiet_p99 * 1000:.1f} ms alone, {loaded_p99 * 1000:.1f} ms beside them"
    )
