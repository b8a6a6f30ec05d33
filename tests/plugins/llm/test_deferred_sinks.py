"""What the triage worker's decision hands on: the doorbell rings for its todos, and a
sink gets the event as a live delivery's sinks do, its envelope included.

A real server with the third-party ``hello`` plugin installed (its JSON-lines sink reads
the ``.acme`` projection from the envelope) and the llm stage deferred.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import select
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from fakeai import FakeAI
from sbllm import API_KEY, KEY_ENV, QUEUES, Tenant, decided, llm_toml
from sbtest import CLI, install_hello
from sbworld import World
from switchboard_llm import service

from switchboard.config import load_config
from switchboard.plugin import SinkEvent
from switchboard.runtime import Runtime

GOOD = {"queue": "triage", "confidence": 0.92, "reason": "a crash report"}
TICKET = json.dumps({"type": "ticket.opened", "id": "T-9", "title": "Printer on fire"}).encode()


@pytest.fixture(scope="module")
def hello_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("hello")
    try:
        yield install_hello(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _sink_lines(path: Path, count: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 20
    lines: list[str] = []
    while time.monotonic() < deadline:
        lines = path.read_text().splitlines() if path.exists() else []
        if len(lines) >= count:
            return [json.loads(line) for line in lines]
        time.sleep(0.1)
    raise AssertionError(f"the sink wrote {len(lines)} of {count} lines")


async def test_the_workers_todos_ring_the_doorbell_and_reach_sinks_with_the_envelope(
    hello_site: Path,
    server_factory: Any,
    dsn: str,
    tmp_path: Path,
    fake_ai: FakeAI,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sink = tmp_path / "sink.jsonl"
    config = tmp_path / "sb.toml"
    config.write_text(
        '[routing]\nstages = ["hello", "rules", "llm"]\n\n'
        f"[plugins.hello]\nsink_path = {json.dumps(str(sink))}\n\n"
        + llm_toml(fake_ai.base_url, mode="deferred", max_timeout_ms=5000)
    )
    path = os.pathsep.join(p for p in (str(hello_site), os.environ.get("PYTHONPATH", "")) if p)
    srv = server_factory(dsn, config=config, env_extra={KEY_ENV: API_KEY, "PYTHONPATH": path})
    w = World(CLI(srv.env))
    w.human("alice")
    owner = w.endpoint(
        "alice", "owner", queues="inbox", webhook_queues="inbox,triage,review", sources="acme"
    )
    hook = w.webhook("owner", "acme")
    model = fake_ai.on("sinks-good", GOOD, delay=0.5)
    monkeypatch.setenv(KEY_ENV, API_KEY)
    monkeypatch.syspath_prepend(str(hello_site))  # the same plugins as the server
    rt = Runtime(load_config(env=srv.env))
    await rt.open_store(migrate=False)
    try:
        await service.set_triage(
            rt, owner["endpoint_id"], {"provider": "fake", "model": model, "queues": QUEUES}
        )
        await _deliver_and_check(Tenant(srv, rt, w, hook, 0), sink, model, fake_ai)
    finally:
        await rt.shutdown()


async def _deliver_and_check(t: Tenant, sink: Path, model: str, fake_ai: FakeAI) -> None:
    hook, dsn = t.hook, t.srv.env["SWITCHBOARD_DATABASE_URL"]
    owner = t.w.endpoints["owner"]

    signature = hmac.new(hook["signing_secret"].encode(), TICKET, hashlib.sha256).hexdigest()
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN todo_ready")
        resp = httpx.post(
            hook["ingest_url"],
            content=TICKET,
            headers={
                "Content-Type": "application/json",
                "X-Acme-Id": "sink-1",
                "X-Acme-Signature": signature,
            },
            timeout=30,
        )
        assert resp.status_code == 202, resp.text
        reply = resp.json()
        assert reply["disposition"] == "pending" and reply["todos"] == []
        rings: list[str] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not rings:
            if select.select([listener.fileno()], [], [], 0.5) != ([], [], []):
                rings += [n.payload for n in listener.notifies(timeout=0.1, stop_after=10)]
        # The ring came with the worker's decision (none at the 202: no todo yet).
        assert rings == [f"{owner['endpoint_id']}:triage"]

    [event] = decided(t, ["sink-1"])
    assert event["trace"]["stage"] == "llm" and [q for q, _ in event["todos"]] == ["triage"]
    [line] = _sink_lines(sink, 1)
    assert line["id"] == reply["event_id"] and line["disposition"] == "routed"
    assert line["keys"] == sorted(SinkEvent.__required_keys__ | SinkEvent.__optional_keys__)
    assert line["title"] == "Printer on fire"  # the envelope's .acme projection
    assert len(fake_ai.requests(model)) == 1
