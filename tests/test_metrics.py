"""GET /metrics after real deliveries: exact counter moves, the worker sum, bounded labels."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psutil
import psycopg
import pytest
from sbtest import CLI, Samples, Server, free_port, make_env, scrape
from sbworld import World, on_runtime

from switchboard.cli.send import build_request
from switchboard.config import load_config
from switchboard.metrics import todo_family, verification_reason
from switchboard.plugin import hookimpl
from switchboard.plugins import build_registries, make_plugin_manager
from switchboard.runtime import Runtime
from switchboard.service import rules as rules_svc
from switchboard.service.ingest import ingest
from switchboard.service.sinkrun import drain_sinks
from switchboard.sources import REASONS, Delivery, Headers

_tenant = itertools.count()


def moved(before: Samples, after: Samples) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The samples whose value changed (counters and histogram counts; not latencies)."""
    keys = set(before) | set(after)
    return {
        k: after.get(k, 0.0) - before.get(k, 0.0)
        for k in keys
        if after.get(k, 0.0) != before.get(k, 0.0)
    }


def series(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return (name, tuple(sorted(labels.items())))


def _world(srv: Server) -> World:
    w = World(CLI(srv.env), prefix=f"m{next(_tenant)}-", direct=True)
    w.human("alice")
    w.endpoint(
        "alice",
        "owner",
        queues="inbox,metricsq",
        webhook_queues="inbox,metricsq",
        sources="github,generic",
    )
    return w


def _post_generic(hook: dict[str, Any], body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        hook["ingest_url"],
        content=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "X-Delivery-Id": str(uuid.uuid4())},
        timeout=30,
    )


def _post_github(
    hook: dict[str, Any], secret: bytes, headers: dict[str, str] | None = None
) -> httpx.Response:
    body, signed = build_request(
        "github",
        b'{"action": "opened"}',
        secret,
        "issues",
        {"X-GitHub-Delivery": str(uuid.uuid4()), **(headers or {})},
        stamp=False,
    )
    return httpx.post(hook["ingest_url"], content=body, headers=signed, timeout=30)


def _until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


class _OwnCodes:
    """A third party's source that declares a refusal code of its own."""

    refusal_reasons = ("sentry_key_revoked",)


def test_the_reason_label_is_the_sources_code_never_its_words() -> None:
    table = {
        # every documented code is its own label (the values /metrics always had, and more)
        **{code: code for code in REASONS},
        # no code, or words: other (the message is never read)
        None: "other",
        "": "other",
        "X-Hub-Signature-256 does not match the body": "other",
        "stale signature timestamp (400 s old, tolerance 300 s)": "other",
        # a well-formed code a source did not declare cannot grow the series
        "sentry_key_revoked": "other",
        "a" * 40: "other",
    }
    assert {d: verification_reason(d) for d in table} == table
    assert verification_reason("sentry_key_revoked", _OwnCodes()) == "sentry_key_revoked"
    assert verification_reason("not_declared", _OwnCodes()) == "other"
    assert verification_reason("Bad Code!", _OwnCodes()) == "other"


def _refusal(name: str, headers: dict[str, str], body: bytes, secret: bytes, now: float) -> Any:
    registries = build_registries(make_plugin_manager())
    source = registries.sources.get(name)
    return source.verify(Delivery(Headers(headers), body), secret, now)


def test_first_party_sources_refuse_with_codes() -> None:
    secret, now = b"codes-secret-0123456789abcdef", 1_800_000_000.0
    gh_body, gh = build_request("github", b'{"action": "x"}', secret, "issues", {}, False)
    gt_body, gt = build_request("gitea", b'{"action": "x"}', secret, "issues", {}, False)
    cairn = json.dumps(
        {"kind": "artifact.created", "event_id": "e-1", "created_at": "2027-01-15T08:00:00Z"}
    ).encode()
    c_body, c_headers = build_request("cairn", cairn, secret, None, {}, False)
    c_now = now  # the body's created_at
    cases = {
        "github wrong secret": (
            ("github", gh, gh_body, b"other-secret-0123456789", now),
            "mismatch",
        ),
        "github no header": (("github", {}, gh_body, secret, now), "missing_header"),
        "github no secret": (("github", gh, gh_body, b"", now), "misconfigured"),
        "gitea wrong secret": (("gitea", gt, gt_body, b"other-secret-0123456789", now), "mismatch"),
        "gitea no header": (("gitea", {}, gt_body, secret, now), "missing_header"),
        "cairn stale": (("cairn", c_headers, c_body, secret, c_now + 3600), "stale_timestamp"),
        "cairn id": (
            ("cairn", {**c_headers, "X-Cairn-Event-Id": "e-2"}, c_body, secret, c_now),
            "id_mismatch",
        ),
    }
    got = {what: _refusal(*args).reason for what, (args, _) in cases.items()}
    assert got == {what: code for what, (_, code) in cases.items()}


def test_todo_gauge_caps_queue_labels() -> None:
    rows = [{"queue": f"q{i}", "state": "pending", "n": 10 - i} for i in range(5)]
    rows.append({"queue": "q4", "state": "dead", "n": 1})
    family = todo_family(rows, max_queues=2)
    got = {tuple(s.labels.values()): s.value for s in family.samples}
    assert got == {
        ("q0", "pending"): 10,
        ("q1", "pending"): 9,
        ("other", "pending"): 8 + 7 + 6,
        ("other", "dead"): 1,
    }


@pytest.fixture(scope="module")
def server(
    module_server_factory: Any, module_dsn: str, tmp_path_factory: pytest.TempPathFactory
) -> Server:
    """One single-process server (default metrics: on the serve address, no per-webhook)."""
    config = tmp_path_factory.mktemp("metrics-config") / "sb.toml"
    config.write_text("[ingest]\nmax_body_bytes = 2048\n[plugins.rules]\nmax_concurrency = 2\n")
    srv: Server = module_server_factory(module_dsn, config=config)
    return srv


def test_real_deliveries_move_the_counters_exactly(server: Server, module_dsn: str) -> None:
    w = _world(server)
    gen = w.webhook("owner", "generic", "inbox")
    dropper = w.webhook("owner", "generic", "inbox")
    faulty = w.webhook("owner", "generic", "inbox")
    gh = w.webhook("owner", "github", "inbox")
    secret = gh["signing_secret"].encode()

    async def set_rules(rt: Any) -> None:
        await rules_svc.set_rules(
            rt,
            None,
            dropper["webhook_id"],
            # the server decides it (direct.py) unless a float is compared: then the sandbox
            [
                {
                    "id": "noise",
                    "expr": '.payload.kind == "noise" or .payload.n > 5',
                    "action": {"drop": True},
                }
            ],
        )
        await rules_svc.set_rules(
            rt,
            None,
            faulty["webhook_id"],
            [{"id": "boom", "expr": 'error("boom")', "action": {"queue": "metricsq"}}],
        )

    on_runtime(server.env, set_rules)
    url = server.base_url + "/metrics"
    rung = series("switchboard_doorbells_rung_total")
    before = scrape(url)

    def rings(post: Callable[[], httpx.Response]) -> None:
        # The doorbell rings after the reply (a sink), and rings for one queue that meet
        # in flight are coalesced: wait for each before the next delivery.
        was = scrape(url).get(rung, 0)
        assert post().status_code == 202
        _until(lambda: scrape(url).get(rung, 0) == was + 1)

    rings(lambda: _post_generic(gen, {"kind": "real"}))
    rings(lambda: _post_github(gh, secret))
    assert _post_github(gh, b"not-the-secret").status_code == 401
    assert _post_github(gh, secret, {"X-Hub-Signature-256": ""}).status_code == 401
    assert _post_generic(dropper, {"kind": "noise"}).status_code == 202  # decided in the server
    rings(lambda: _post_generic(dropper, {"kind": "x", "n": 1.5}))  # a float: the sandbox's
    rings(lambda: _post_generic(faulty, {"kind": "any"}))
    unknown = gen["ingest_url"].rsplit("/", 1)[0] + "/" + "0" * 40
    assert httpx.post(unknown, content=b"{}", timeout=10).status_code == 404
    assert httpx.post(gen["ingest_url"], content=b"x" * 4096, timeout=10).status_code == 413

    D = "switchboard_deliveries_total"
    OUT = "switchboard_routing_outcomes_total"
    expected = {
        series(D, source="generic", status="202", reason="none"): 4,
        series(D, source="github", status="202", reason="none"): 1,
        series(D, source="github", status="401", reason="mismatch"): 1,
        series(D, source="github", status="401", reason="missing_header"): 1,
        series(D, source="unknown", status="404", reason="none"): 1,
        series(D, source="unknown", status="413", reason="none"): 1,
        series(
            OUT, stage="default", cause="no_match_default", disposition="routed", fault="none"
        ): 3,
        series(OUT, stage="rule", cause="drop", disposition="dropped", fault="none"): 1,
        series(
            OUT, stage="default", cause="no_match_default", disposition="routed", fault="error"
        ): 1,
        series("switchboard_rule_faults_total", cause="error"): 1,
        series("switchboard_todos_created_total"): 4,
        series("switchboard_rules_direct_evaluations_total", outcome="decided"): 1,
        series("switchboard_rules_direct_evaluations_total", outcome="deferred"): 1,
        series("switchboard_sandbox_evaluation_seconds_count"): 2,
        # .payload.kind is all the dropper's rule reads; error("boom") is applied to the root
        series("switchboard_sandbox_envelope_bytes_count", cut="paths"): 1,
        series("switchboard_sandbox_envelope_bytes_count", cut="whole"): 1,
        series("switchboard_doorbells_rung_total"): 4,
        series("switchboard_sink_rings_total", sink="doorbell"): 4,
    }
    for status, n in (("202", 5), ("401", 2), ("404", 1)):  # a 413 has no latency
        expected[series("switchboard_ingest_latency_seconds_count", status=status)] = n

    after = scrape(url)
    delta = moved(before, after)
    wanted = {k for k in delta if k[0] in {name for name, _ in expected}}
    assert {k: delta[k] for k in wanted} == expected
    # No per-webhook series unless asked for.
    assert not [k for k in after if dict(k[1]).get("webhook_id")]

    # The todo gauge matches the database (open todos of every queue, by state).
    with psycopg.connect(module_dsn) as conn:
        rows = conn.execute(
            "SELECT queue, state, count(*) FROM todos WHERE state <> 'done' GROUP BY 1, 2"
        ).fetchall()
    gauge = {
        (dict(k[1])["queue"], dict(k[1])["state"]): v
        for k, v in after.items()
        if k[0] == "switchboard_todos"
    }
    assert gauge == {(q, s): float(n) for q, s, n in rows}
    assert gauge[("inbox", "pending")] >= 3


def test_the_held_gauge_counts_held_deliveries(server: Server, module_dsn: str) -> None:
    w = _world(server)
    hook = w.webhook("owner", "generic", "inbox")
    hid = hook["webhook_id"]
    boom = [{"id": "boom", "expr": 'error("boom")', "action": {"queue": "inbox"}}]

    async def hold(rt: Any) -> None:
        await rules_svc.save_config(
            rt, None, hid, lambda c: {**c, "rules": boom, "on_fault": "hold"}
        )

    on_runtime(server.env, hold)
    for n in range(2):
        assert _post_generic(hook, {"n": n}).status_code == 202
    url = server.base_url + "/metrics"
    gauge = series("switchboard_held_events")

    def held_in_db() -> float:
        with psycopg.connect(module_dsn) as conn:
            row = conn.execute("SELECT count(*) FROM events WHERE disposition = 'held'").fetchone()
        return float(row[0]) if row else 0.0

    before = held_in_db()
    assert before >= 2
    _until(lambda: scrape(url).get(gauge) == held_in_db())

    async def release(rt: Any) -> None:
        from switchboard.service.reroute import release_held

        await rules_svc.save_config(rt, None, hid, lambda c: {**c, "rules": []})
        done = await release_held(rt, None, hid, plan=False)
        assert done["todos_created"] == 2

    on_runtime(server.env, release)
    assert held_in_db() == before - 2
    _until(lambda: scrape(url).get(gauge) == held_in_db())


def test_metrics_disabled_is_404(server_factory: Any, dsn: str, tmp_path: Path) -> None:
    config = tmp_path / "off.toml"
    config.write_text("[metrics]\nenabled = false\n")
    srv = server_factory(dsn, config=config)
    assert httpx.get(srv.base_url + "/metrics", timeout=10).status_code == 404
    assert httpx.get(srv.base_url + "/healthz", timeout=10).status_code == 200


def test_two_workers_sum_on_a_separate_address_with_per_webhook_series(
    server_factory: Any,
    dsn: str,
    tmp_path: Path,
) -> None:
    metrics_port = free_port()
    config = tmp_path / "workers.toml"
    config.write_text(f'[metrics]\naddr = "127.0.0.1:{metrics_port}"\nper_webhook = true\n')
    srv = server_factory(dsn, "--workers", "2", config=config)
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    # Moved: the serve address no longer answers /metrics.
    assert httpx.get(srv.base_url + "/metrics", timeout=10).status_code == 404
    w = _world(srv)
    hook = w.webhook("owner", "generic", "inbox")
    before = scrape(url)
    n = 12
    for i in range(n):
        # A connection each (no keep-alive), so the kernel spreads them over both workers.
        with httpx.Client() as client:
            resp = client.post(
                hook["ingest_url"],
                content=b'{"i": %d}' % i,
                headers={"Content-Type": "application/json", "X-Delivery-Id": f"d-{i}"},
                timeout=30,
            )
        assert resp.status_code == 202
    after = scrape(url)
    delta = moved(before, after)
    assert (
        delta[series("switchboard_deliveries_total", source="generic", status="202", reason="none")]
        == n
    )
    assert (
        delta[
            series(
                "switchboard_webhook_deliveries_total", webhook_id=hook["webhook_id"], status="202"
            )
        ]
        == n
    )
    assert (
        delta[
            series(
                "switchboard_webhook_routing_outcomes_total",
                webhook_id=hook["webhook_id"],
                stage="default",
                cause="no_match_default",
            )
        ]
        == n
    )
    gauge = {
        dict(k[1])["queue"]: v
        for k, v in after.items()
        if k[0] == "switchboard_todos" and dict(k[1])["state"] == "pending"
    }
    assert gauge["inbox"] == n
    # Both workers counted some (each writes its own file), and all of it goes at exit.
    directory = _multiproc_dir(srv)
    assert len(list(directory.glob("counter_*.db"))) >= 2
    srv.stop()
    assert not directory.exists()
    # The workers log in the format serve resolved (JSON: stderr is a file here).
    lines = [
        json.loads(line)
        for line in srv.log.read_text().splitlines()
        if line.startswith("{") and '"switchboard.delivery"' in line
    ]
    assert len(lines) == n and {d["webhook_id"] for d in lines} == {hook["webhook_id"]}


def _multiproc_dir(srv: Server) -> Path:
    """The workers' series directory, read from a worker's environment."""
    assert srv.proc is not None
    for child in psutil.Process(srv.proc.pid).children(recursive=True):
        found = child.environ().get("PROMETHEUS_MULTIPROC_DIR")
        if found:
            return Path(found)
    raise AssertionError("no worker has PROMETHEUS_MULTIPROC_DIR")


async def test_sandbox_counts_evaluations_and_waits_for_a_slot() -> None:
    """One slot: a slow evaluation holds it, a second waits ``slot_wait_ms`` and gives up."""
    from prometheus_client import REGISTRY
    from sbsandbox import sandbox

    def value(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    names = [
        ("switchboard_sandbox_evaluation_seconds_count", {}),
        ("switchboard_sandbox_slot_waits_total", {"outcome": "busy"}),
        ("switchboard_sandbox_slot_waits_total", {"outcome": "acquired"}),
        ("switchboard_sandbox_slot_wait_seconds_count", {}),
    ]
    before = [value(n, **lb) for n, lb in names]
    slow = [("slow", "last(range(1e12)) > 0")]
    async with sandbox(max_concurrency=1, owner_concurrency=1, slot_wait_ms=20) as sb:
        first = asyncio.create_task(sb.evaluate(slow, {}, {"payload": {}}, owner="o", scope="s"))
        await asyncio.sleep(0.01)  # the first takes the slot
        # another webhook of the same owner (one webhook's deliveries would share the frame)
        second = await sb.evaluate(slow, {}, {"payload": {}}, owner="o", scope="s2")
        await first
    assert [f.cause for f in second.faults] == ["sandbox_busy"]
    after = [value(n, **lb) for n, lb in names]
    assert [a - b for a, b in zip(after, before, strict=True)] == [1, 1, 0, 1]


class _BrokenSink:
    name = "broken"

    async def deliver(self, rt: Any, event: Any, todos: Any) -> None:
        raise RuntimeError("the sink's far end is down")


class _BrokenSinkPlugin:
    """A plugin with a sink that always raises (registered before the doorbell's)."""

    @hookimpl
    def switchboard_register_sinks(self, register: Any) -> None:
        register.add(_BrokenSink())


def test_a_failing_sink_is_counted_and_the_next_sink_still_runs(dsn: str, tmp_path: Path) -> None:
    from prometheus_client import REGISTRY

    cli = CLI(make_env(dsn, tmp_path / "data"))
    w = World(cli, direct=True)
    w.human("owner")
    w.endpoint("owner", "owner")
    hook = w.webhook("owner", "generic")
    token = hook["ingest_url"].rsplit("/", 1)[1]

    def value(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    async def deliver() -> list[float]:
        pm = make_plugin_manager()
        pm.register(_BrokenSinkPlugin(), name="broken-sink")
        rt = Runtime(load_config(env=cli.env), pm=pm)
        assert [s.name for s in rt.registries.sinks][:1] == ["broken"], list(rt.registries.sinks)
        await rt.open_store(migrate=False)
        try:
            before = [
                value("switchboard_sink_failures_total", sink="broken"),
                value("switchboard_doorbells_rung_total"),
            ]
            reply = await ingest(rt, token, Headers({"X-Delivery-Id": "s-1"}), b"{}", None)
            assert reply.status == 202 and reply.body["created"] == 1, reply
            await drain_sinks()
            return [
                value("switchboard_sink_failures_total", sink="broken") - before[0],
                value("switchboard_doorbells_rung_total") - before[1],
            ]
        finally:
            await rt.shutdown()

    assert asyncio.run(deliver()) == [1.0, 1.0]


def test_kept_series_are_the_labelled_series_and_stay_bounded(monkeypatch: Any) -> None:
    from switchboard import metrics

    one = metrics.series(metrics.DELIVERIES, "generic", "202", "none")
    assert one is metrics.series(metrics.DELIVERIES, "generic", "202", "none")
    assert one is metrics.DELIVERIES.labels("generic", "202", "none")
    assert metrics.series(metrics.DELIVERIES, "generic", "401", "none") is not one
    monkeypatch.setattr(metrics, "_SERIES_MAX", 3)
    for status in ("500", "503", "404", "413"):
        metrics.series(metrics.DELIVERIES, "generic", status, "none")
    assert len(metrics._SERIES) <= 3
    # a dropped series is asked for again: still the same labelled series
    assert metrics.series(metrics.DELIVERIES, "generic", "202", "none") is one
