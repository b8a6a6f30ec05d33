"""Refused deliveries, recorded: a code per cause, bounded per webhook, never the body."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from switchboard import metrics
from switchboard.cli.send import build_request
from switchboard.errors import InvalidArgument, NotFound
from switchboard.runtime import Runtime
from switchboard.service import identity, refusals, webhooks
from switchboard.service.ingest import ingest
from switchboard.sources import Delivery, Headers, Verification
from switchboard.store import Refusal

SECRET = "refusal-secret-0123456789abcdef"


async def _owner(rt: Runtime, human: str = "alice") -> dict[str, Any]:
    await identity.add_human(rt, human)
    made = await identity.vend_endpoint(
        rt,
        owner=human,
        name="owner",
        queues=["inbox"],
        webhook_queues=["inbox"],
        source_types=["generic", "github", "cairn"],
        webhook_max=4,
    )
    return await rt.store.get_endpoint(made["endpoint_id"])


async def _hook(rt: Runtime, owner: dict[str, Any], source: str) -> tuple[str, str]:
    made = await webhooks.create_webhook(rt, owner, source, "inbox", signing_secret=SECRET)
    return made["webhook_id"], str(made["ingest_url"]).rsplit("/", 1)[1]


def _cairn_body(at: float) -> bytes:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
    return json.dumps(
        {"kind": "artifact.created", "event_id": str(uuid.uuid4()), "created_at": stamp}
    ).encode()


async def test_each_cause_is_recorded_with_its_code(runtime: Runtime) -> None:
    owner = await _owner(runtime)
    gh_id, gh = await _hook(runtime, owner, "github")
    cairn_id, cairn = await _hook(runtime, owner, "cairn")
    body, signed = build_request(
        "github", b'{"action": "opened"}', b"not-the-secret-at-all", "issues", {}, False
    )
    signed["X-GitHub-Delivery"] = "gh-wrong-secret"
    assert (
        await ingest(runtime, gh, Headers(signed), body, None, source_ip="192.0.2.7")
    ).status == 401
    bare = {k: v for k, v in signed.items() if k != "X-Hub-Signature-256"}
    bare["X-GitHub-Delivery"] = "gh-no-header"
    assert (await ingest(runtime, gh, Headers(bare), body, None)).status == 401
    stale_body, stale = build_request(
        "cairn", _cairn_body(time.time() - 3600), SECRET.encode(), None, {}, False
    )
    assert (await ingest(runtime, cairn, Headers(stale), stale_body, None)).status == 401
    await runtime.store.refusals.drain()

    got = await refusals.list_refusals(runtime, owner, gh_id)
    assert got["total"] == 2 and got["kept"] == 100
    by_id = {r["delivery_id"]: r for r in got["refusals"]}
    assert by_id["gh-wrong-secret"]["reason"] == "mismatch"
    assert by_id["gh-no-header"]["reason"] == "missing_header"
    assert by_id["gh-wrong-secret"]["source_ip"] == "192.0.2.7"
    assert by_id["gh-wrong-secret"]["size"] == len(body)
    assert [r["delivery_id"] for r in got["refusals"]] == ["gh-no-header", "gh-wrong-secret"]
    # the signature is redacted, the body never kept
    kept = json.dumps(got)
    assert signed["X-Hub-Signature-256"] not in kept and "opened" not in kept
    [stale_row] = (await refusals.list_refusals(runtime, owner, cairn_id))["refusals"]
    assert stale_row["reason"] == "stale_timestamp" and "old" in stale_row["detail"]


async def test_only_the_owner_sees_a_webhooks_refusals(runtime: Runtime) -> None:
    owner = await _owner(runtime)
    other = await _owner(runtime, "bob")
    hook_id, _ = await _hook(runtime, owner, "github")
    with pytest.raises(NotFound):
        await refusals.list_refusals(runtime, other, hook_id)
    with pytest.raises(InvalidArgument):
        await refusals.list_refusals(runtime, owner, hook_id, limit=0)
    # the operator (no caller) sees every webhook's
    assert (await refusals.list_refusals(runtime, None, hook_id))["total"] == 0


async def test_a_flood_keeps_n_rows_per_webhook_and_counts_the_rest(runtime: Runtime) -> None:
    owner = await _owner(runtime)
    flooded_id, _ = await _hook(runtime, owner, "github")
    quiet_id, _ = await _hook(runtime, owner, "github")
    flooded = await runtime.store.get_webhook(flooded_id)
    quiet = await runtime.store.get_webhook(quiet_id)
    source = runtime.registries.sources.get("github")
    forged = Verification.refuse(reason="mismatch", detail="X-Hub-Signature-256 does not match")
    # The receiver's own path, 10,000 times in one turn of the loop (faster than any HTTP).
    for i in range(10_000):
        delivery = Delivery(
            Headers({"X-GitHub-Delivery": f"f-{i}", "X-Hub-Signature-256": "sha256=00"}), b"{}"
        )
        refusals.record_refusal(runtime, flooded, source, delivery, forged, "198.51.100.1")
    refusals.record_refusal(
        runtime, quiet, source, Delivery(Headers({}), b"{}"), forged, "198.51.100.2"
    )
    await runtime.store.refusals.drain()
    rows = await runtime.store.db.fetchall(
        "SELECT webhook_id, count(*) AS n FROM webhook_refusals GROUP BY webhook_id"
    )
    assert {r["webhook_id"]: r["n"] for r in rows} == {flooded_id: 100, quiet_id: 1}
    got = await refusals.list_refusals(runtime, owner, flooded_id, limit=100)
    assert got["total"] == 10_000
    assert len(got["refusals"]) == 100
    # the newest kept are the last recorded, newest first
    seqs = [r["delivery_id"] for r in got["refusals"]]
    assert seqs == sorted(seqs, key=lambda d: -int(d.split("-")[1]))
    # a second flood overwrites the ring in place: still 100 rows
    for i in range(500):
        delivery = Delivery(Headers({"X-GitHub-Delivery": f"g-{i}"}), b"{}")
        refusals.record_refusal(runtime, flooded, source, delivery, forged, None)
    await runtime.store.refusals.drain()
    again = await refusals.list_refusals(runtime, owner, flooded_id, limit=100)
    assert again["total"] == 10_500 and len(again["refusals"]) == 100
    assert again["refusals"][0]["delivery_id"] == "g-499"


async def test_a_refusal_with_a_header_byte_that_is_not_utf8_is_recorded(
    runtime: Runtime,
) -> None:
    """Sanic hands a header byte like 0xe9 over surrogate-escaped: the record shows U+FFFD
    (as an event's stored headers do) and is written, never dropped with a traceback."""
    owner = await _owner(runtime)
    gh_id, gh = await _hook(runtime, owner, "github")
    unrecorded = metrics.REFUSALS_UNRECORDED._value.get()
    body, signed = build_request("github", b"{}", b"not-the-secret-at-all", "issues", {}, False)
    signed["X-GitHub-Delivery"] = "gh-latin1"
    headers = Headers([*signed.items(), ("X-Note", "caf\udce9"), ("X-N\udcfful", "z\x00")])
    assert (await ingest(runtime, gh, headers, body, None)).status == 401
    await runtime.store.refusals.drain()
    [row] = (await refusals.list_refusals(runtime, owner, gh_id))["refusals"]
    assert row["delivery_id"] == "gh-latin1"
    assert row["headers"]["x-note"] == "caf\ufffd" and row["headers"]["x-n\ufffdul"] == "z\ufffd"
    assert metrics.REFUSALS_UNRECORDED._value.get() == unrecorded


async def test_headers_are_capped_at_one_kib() -> None:
    many = Headers([(f"X-H-{i}", "v" * 100) for i in range(50)] + [("Authorization", "x")])
    capped = refusals.capped_headers(Delivery(many, b""))
    assert len(json.dumps(capped, ensure_ascii=False).encode()) <= refusals.HEADERS_MAX_BYTES
    assert capped[refusals.TRUNCATED].endswith("more not kept")
    small = refusals.capped_headers(Delivery(Headers({"Authorization": "Bearer abc"}), b""))
    assert small["authorization"] != "Bearer abc"


async def test_a_refusal_is_answered_when_recording_fails(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    owner = await _owner(runtime)
    hook_id, token = await _hook(runtime, owner, "github")

    async def broken(*_: Any) -> None:
        raise RuntimeError("the database is gone")

    monkeypatch.setattr(runtime.store.refusals, "_write", broken)
    before = metrics.REFUSALS_UNRECORDED._value.get()
    reply = await ingest(runtime, token, Headers({}), b"{}", None)
    assert reply.status == 401
    assert "missing" not in json.dumps(reply.body)  # the producer is told nothing more
    await runtime.store.refusals.drain()
    assert metrics.REFUSALS_UNRECORDED._value.get() == before + 1
    assert (await refusals.list_refusals(runtime, owner, hook_id))["total"] == 0


async def test_the_cli_lists_what_mcp_lists(runtime: Runtime, cli: Any) -> None:
    owner = await _owner(runtime)
    hook_id, token = await _hook(runtime, owner, "github")
    headers = Headers({"X-GitHub-Delivery": "cli-1", "X-Hub-Signature-256": "sha256=" + "0" * 64})
    assert (await ingest(runtime, token, headers, b"{}", None)).status == 401
    await runtime.store.refusals.drain()
    doc = cli.fast().json("webhook", "refusals", hook_id, "--json")
    assert doc == await refusals.list_refusals(runtime, owner, hook_id)
    assert [r["reason"] for r in doc["refusals"]] == ["mismatch"]
    table = cli.fast().run("webhook", "refusals", hook_id, "--table").stdout
    assert "mismatch" in table and "1 refused in all" in table
    bad = cli.fast().run("webhook", "refusals", str(uuid.uuid4()), check=False)
    assert bad.returncode == 1 and "not found" in bad.stderr


async def test_the_count_and_the_rows_are_read_together(runtime: Runtime) -> None:
    """A listing never counts a refusal it does not show: the count and the rows are one
    snapshot, however the writer's commits fall between a reader's reads (read apart,
    ``total`` ran ahead of the rows and a caller that waited for it saw too few)."""
    owner = await _owner(runtime)
    hook_id, _ = await _hook(runtime, owner, "github")
    writer = runtime.store.refusals
    wrote = 60
    done = asyncio.Event()

    async def write() -> None:
        try:
            for n in range(wrote):
                writer.add(
                    Refusal(hook_id, datetime.now(UTC), "mismatch", None, f"d-{n}", None, 2, {})
                )
                await writer.drain()  # one transaction each: many commits to fall between
        finally:
            done.set()

    async def read() -> int:
        reads = 0
        while not done.is_set():
            rows, count = await runtime.store.list_refusals(hook_id, 100)
            total = 0 if count is None else int(count["total"])
            assert len(rows) == total, f"count {total}, rows {len(rows)}"
            assert [r["seq"] for r in rows] == list(range(total, 0, -1))
            reads += 1
        return reads

    _, *reads = await asyncio.gather(write(), read(), read(), read())
    assert min(reads) > 5  # the readers really ran beside the writes
    got = await refusals.list_refusals(runtime, owner, hook_id, limit=100)
    assert got["total"] == wrote and len(got["refusals"]) == wrote
