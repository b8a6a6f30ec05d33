"""A frozen PostgreSQL (SIGSTOP on all its processes: a network partition) costs every
request at most ``server.database_timeout_ms``, and nothing once it thaws."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from sbfaults import PrivatePostgres, deliver, stored_deliveries, timed
from sbtest import CLI
from sbworld import World

#: The deadline under test (the default is 2000: the same code, a shorter test).
TIMEOUT_MS = 1000
#: Slack for a loaded two-core machine on top of the promise.
SLACK_S = 1.0
#: Concurrent requests per surface while frozen.
CONCURRENT = 8


@pytest.mark.slow
def test_a_frozen_database_answers_503_within_the_deadline_and_loses_nothing(
    server_factory: Any, private_pg: PrivatePostgres, private_dsn: str, fault_config: Any
) -> None:
    config: Path = fault_config(f"[server]\ndatabase_timeout_ms = {TIMEOUT_MS}\n")
    srv = server_factory(private_dsn, config=config)
    w = World(CLI(srv.env))
    w.human("alice")
    w.endpoint("alice", "owner")
    url = w.webhook("owner", "generic")["ingest_url"]
    with httpx.Client() as http:
        # Warm: every worker connection has served (the pool is full of lent-before ones).
        for i in range(CONCURRENT):
            assert deliver(http, url, f"warm-{i}").status_code == 202
        assert http.get(srv.base_url + "/metrics").status_code == 200

        with private_pg.frozen():
            with ThreadPoolExecutor(CONCURRENT + 2) as pool:
                ingests = [
                    pool.submit(timed, deliver, http, url, f"frozen-{i}") for i in range(CONCURRENT)
                ]
                health = pool.submit(timed, http.get, srv.base_url + "/healthz", timeout=30)
                scrape = pool.submit(timed, http.get, srv.base_url + "/metrics", timeout=30)
                ingest_times = [f.result() for f in ingests]
                health_time, health_resp = health.result()
                scrape_time, scrape_resp = scrape.result()
            # Once the pool's connections are all abandoned, new ones hang on connect.
            late_time, late = timed(deliver, http, url, "frozen-late")

        for seconds, resp in [*ingest_times, (late_time, late)]:
            assert not isinstance(resp, Exception), resp
            assert resp.status_code == 503, resp.text
            assert resp.json() == {"error": "database unavailable", "code": "unavailable"}
            assert resp.headers["retry-after"].isdigit()
            assert seconds < TIMEOUT_MS / 1000 + 0.5 + SLACK_S, seconds
        assert health_resp.status_code == 503 and health_time < 1.0 + SLACK_S, health_time
        assert scrape_resp.status_code == 200 and scrape_time < 1.0 + SLACK_S, scrape_time
        age = [
            line
            for line in scrape_resp.text.splitlines()
            if line.startswith("switchboard_todos_age")
        ]
        assert age and float(age[0].split()[-1]) > 0, age
        print(
            f"frozen: ingest 503 in {sorted(round(s, 2) for s, _ in ingest_times)} s (of"
            f" {CONCURRENT}), late ingest {late_time:.2f} s, /healthz {health_time:.2f} s,"
            f" /metrics {scrape_time:.2f} s"
        )

        # Thawed: healthy again at once, and every retried delivery lands exactly once.
        deadline = time.monotonic() + 15
        while http.get(srv.base_url + "/healthz", timeout=5).status_code != 200:
            assert time.monotonic() < deadline, "not healthy 15 s after the thaw"
            time.sleep(0.1)
        ids = [f"warm-{i}" for i in range(CONCURRENT)]
        ids += [f"frozen-{i}" for i in range(CONCURRENT)] + ["frozen-late"]
        for delivery in ids:
            assert deliver(http, url, delivery).status_code == 202, delivery
    assert stored_deliveries(private_dsn) == {d: 1 for d in ids}
