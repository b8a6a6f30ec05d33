"""A serve worker keeps its token resolutions, and no change outlives one: a delivery after
a rules change, an endpoint's expiry or a webhook's deletion sees it, over real HTTP."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg
from sbtest import CLI, free_port
from sbworld import World


def _resolves(metrics_addr: str) -> float:
    """Token lookups the server has sent to the database (batches of them)."""
    text = httpx.get(f"http://{metrics_addr}/metrics", timeout=10).text
    found = re.search(r'^switchboard_store_batch_size_count\{step="resolve"\} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def test_kept_resolutions_serve_deliveries_and_no_change_outlives_them(
    server_factory: Any, dsn: str, tmp_path: Path
) -> None:
    addr = f"127.0.0.1:{free_port()}"
    config = tmp_path / "sb.toml"
    config.write_text(f'[metrics]\naddr = "{addr}"\n')
    srv = server_factory(dsn, config=config)
    w = World(CLI(srv.env), direct=True)
    w.human("erin")
    w.endpoint("erin", "owner", sources="generic")
    hook = w.webhook("owner", "generic")
    owner = w.endpoints["owner"]["endpoint_id"]

    def post(n: int) -> httpx.Response:
        return httpx.post(hook["ingest_url"], content=b'{"n": %d}' % n, timeout=30)

    first = post(0)
    assert first.status_code == 202 and first.json()["created"] == 1
    looked_up = _resolves(addr)
    for n in range(1, 6):
        assert post(n).json()["todos"][0]["endpoint_id"] == owner
    assert _resolves(addr) == looked_up, "a kept resolution was looked up again"

    # A rules change by another process: the very next delivery follows it.
    rules = tmp_path / "rules.json"
    rules.write_text(
        json.dumps({"rules": [{"id": "off", "expr": "true", "action": {"drop": True}}]})
    )
    w.cli.json("webhook", "rules", "set", hook["webhook_id"], str(rules))
    dropped = post(6)
    assert dropped.status_code == 202 and dropped.json().get("dropped") is True
    assert _resolves(addr) > looked_up  # the kept row went stale: looked up afresh
    rules.write_text(json.dumps({"rules": []}))
    w.cli.json("webhook", "rules", "set", hook["webhook_id"], str(rules))
    assert post(7).json()["created"] == 1

    # The owner endpoint expires in a second: kept no longer than that.
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE endpoints SET expires_at = now() + interval '1.5 seconds' WHERE id = %s",
            (owner,),
        )
    assert post(8).json()["created"] == 1  # resolved afresh, kept until the expiry
    time.sleep(2.0)
    expired = post(9)
    assert expired.status_code == 503, expired.text  # no live target left

    # Deleted: 404, whatever was kept.
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE endpoints SET expires_at = NULL WHERE id = %s", (owner,))
    assert post(10).status_code == 202
    w.cli.json("webhook", "delete", hook["webhook_id"])
    assert post(11).status_code == 404
    with psycopg.connect(dsn) as conn:
        stored = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE disposition = 'dropped') FROM events"
            " WHERE external_id LIKE %s OR deleted_webhook_id = %s",
            (f"{hook['webhook_id']}:%", hook["webhook_id"]),
        ).fetchone()
    assert stored == (10, 1)


def test_a_rotated_secret_verifies_at_once_on_a_kept_token(server_factory: Any, dsn: str) -> None:
    """The old URL, kept by the worker, signed with the new secret: a refusal is never
    answered from a kept resolution, so the rotation is seen and the delivery verifies."""
    from switchboard.cli.send import build_request

    srv = server_factory(dsn)
    w = World(CLI(srv.env), direct=True)
    w.human("frank")
    w.endpoint("frank", "owner", sources="github")
    hook = w.webhook("owner", "github")

    def post(secret: str, n: int) -> httpx.Response:
        data, headers = build_request(
            "github", b'{"n": %d}' % n, secret.encode(), "issues", {}, stamp=False
        )
        return httpx.post(hook["ingest_url"], content=data, headers=headers, timeout=30)

    assert post(hook["signing_secret"], 1).status_code == 202  # kept from here on
    rotated = w.cli.json("webhook", "rotate", hook["webhook_id"])
    assert rotated["signing_secret"] != hook["signing_secret"]
    assert post(rotated["signing_secret"], 2).status_code == 202
    # and the old secret still verifies inside the overlap window
    assert post(hook["signing_secret"], 3).status_code == 202
    assert post("not-the-secret", 4).status_code == 401
