"""Deliveries written straight through the store, for the group-write tests."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
from prometheus_client import REGISTRY

from switchboard.errors import SwitchboardError
from switchboard.runtime import Runtime
from switchboard.service import identity, webhooks
from switchboard.store import DeliveryOutcome


def batches() -> tuple[float, float]:
    """(flushes, deliveries) the write batcher has recorded so far in this process."""
    labels = {"step": "write"}
    count = REGISTRY.get_sample_value("switchboard_store_batch_size_count", labels) or 0.0
    total = REGISTRY.get_sample_value("switchboard_store_batch_size_sum", labels) or 0.0
    return count, total


async def in_one_batch(rt: Runtime, eps: list[str], *calls: Any) -> list[Any]:
    """Run ``calls`` (record_delivery coroutines) as one batch behind a lead delivery: they
    are all submitted during the lead's turn of the loop, so all go in its flush."""
    before = batches()
    outs = await asyncio.gather(
        rt.store.record_delivery(event(f"lead-{len(calls)}-{before[0]}"), TODO, eps),
        *calls,
        return_exceptions=True,
    )
    flushes, items = batches()
    assert (flushes - before[0], items - before[1]) == (1, len(calls) + 1), "not one batch"
    assert isinstance(outs[0], DeliveryOutcome) and outs[0].new_event
    return list(outs[1:])


async def endpoints(rt: Runtime, n: int = 2) -> list[str]:
    await identity.add_human(rt, "alice")
    return [
        str(
            (await identity.vend_endpoint(rt, owner="alice", name=f"ep{i}", queues=["inbox"]))[
                "endpoint_id"
            ]
        )
        for i in range(n)
    ]


def event(
    external_id: str, *, disposition: str = "routed", trace: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "source": "generic",
        "kind": None,
        "external_id": external_id,
        "headers": {"content-type": "application/json"},
        "raw_headers": b"content-type: x",
        "body": b"{}",
        "content_type": "application/json",
        "size": 2,
        "verified": False,
        "trust_mode": "token",
        "verify_detail": None,
        "webhook_id": None,
        "routing_trace": trace or {"stage": "default"},
        "disposition": disposition,
    }


TODO = {"queue": "inbox", "title": "t", "payload": {"n": 1}, "work_order": None}


def count(dsn: str, sql: str, *args: Any) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(sql, args).fetchone()
        assert row is not None
        return int(row[0])


async def generic_webhook(rt: Runtime, name: str) -> tuple[dict[str, Any], str]:
    """A generic webhook of alice's fresh endpoint ``name`` (its row under ``"owner"``), and
    its ingest token."""
    try:
        await identity.add_human(rt, "alice")
    except SwitchboardError:  # added by an earlier call
        pass
    made = await identity.vend_endpoint(
        rt,
        owner="alice",
        name=name,
        queues=["inbox"],
        webhook_queues=["inbox"],
        source_types=["generic"],
        webhook_max=1,
    )
    owner = await rt.store.get_endpoint(made["endpoint_id"])
    hook = await webhooks.create_webhook(rt, owner, "generic", "inbox")
    return {**hook, "owner": owner}, hook["ingest_url"].rsplit("/", 1)[-1]
