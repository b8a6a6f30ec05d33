"""One structured log line per delivery, no credential or payload in it; levels and start-up lines."""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from sbtest import CLI, Server, free_port
from sbworld import World

from switchboard.cli.send import build_request
from switchboard.logsetup import JsonFormatter, TextFormatter, fields

#: In every payload this module sends: it must never reach a log line.
MARKER = "PAYLOAD-MARKER-7f3a"

#: The module server's metrics address (picked when it starts).
METRICS: dict[str, str] = {}


def _lines(srv: Server, logger: str | None = None) -> list[dict[str, Any]]:
    """The server log's JSON lines (other output, e.g. the banner, is skipped)."""
    out = []
    for line in srv.log.read_text().splitlines():
        if line.startswith("{"):
            doc = json.loads(line)
            if logger is None or doc["logger"] == logger:
                out.append(doc)
    return out


@pytest.fixture(scope="module")
def server(
    module_server_factory: Any, module_dsn: str, tmp_path_factory: pytest.TempPathFactory
) -> Server:
    """Config says warning; the flag says info, and wins. Metrics on an address of their own."""
    METRICS["addr"] = f"127.0.0.1:{free_port()}"
    config = tmp_path_factory.mktemp("log-config") / "sb.toml"
    config.write_text(
        f'[log]\nlevel = "warning"\nformat = "json"\n[metrics]\naddr = "{METRICS["addr"]}"\n'
    )
    srv: Server = module_server_factory(module_dsn, "--log-level", "info", config=config)
    return srv


def test_a_line_per_delivery_without_secrets_or_payload(server: Server) -> None:
    w = World(CLI(server.env), direct=True)
    w.human("alice")
    w.endpoint("alice", "owner", sources="github,generic")
    gh = w.webhook("owner", "github")
    gen = w.webhook("owner", "generic")
    secret = gh["signing_secret"]
    body = json.dumps({"action": "opened", "note": MARKER}).encode()
    delivery = str(uuid.uuid4())
    data, headers = build_request(
        "github", body, secret.encode(), "issues", {"X-GitHub-Delivery": delivery}, stamp=False
    )
    signature = headers["X-Hub-Signature-256"]
    assert httpx.post(gh["ingest_url"], content=data, headers=headers).status_code == 202
    forged = {**headers, "X-Hub-Signature-256": "sha256=" + "0" * 64}
    assert httpx.post(gh["ingest_url"], content=data, headers=forged).status_code == 401
    assert httpx.post(gen["ingest_url"] + "x", content=data).status_code == 404
    assert (
        httpx.post(gen["ingest_url"], content=data, headers={"X-Delivery-Id": "g-1"}).status_code
        == 202
    )

    lines = _lines(server, "switchboard.delivery")
    assert [d["status"] for d in lines] == [202, 401, 404, 202]
    ok, refused, unknown, token_trust = lines
    for doc in lines:
        assert {
            "time",
            "level",
            "logger",
            "message",
            "webhook_id",
            "event_id",
            "source",
            "kind",
            "status",
            "disposition",
            "stage",
            "cause",
            "faults",
            "latency_ms",
            "todos_created",
        } <= set(doc)
        assert doc["level"] == "info"
    assert ok["webhook_id"] == gh["webhook_id"] and ok["source"] == "github"
    assert ok["kind"] == "issues" and ok["disposition"] == "routed"
    assert ok["stage"] == "default" and ok["cause"] == "no_match_default"
    assert ok["todos_created"] == 1 and ok["event_id"] and ok["faults"] == []
    assert isinstance(ok["latency_ms"], float)
    # where a stored delivery's time went: its routing, then its write (each rounded to 0.1)
    for stored in (ok, token_trust):
        assert isinstance(stored["route_ms"], float) and stored["route_ms"] >= 0
        assert isinstance(stored["record_ms"], float) and stored["record_ms"] > 0
        assert stored["route_ms"] + stored["record_ms"] <= stored["latency_ms"] + 0.2
    for never_routed in (refused, unknown):
        assert "route_ms" not in never_routed and "record_ms" not in never_routed
    assert refused["verify_reason"] == "mismatch"
    assert refused["verify_detail"] == "X-Hub-Signature-256 does not match the body"
    assert refused["event_id"] is None and refused["disposition"] is None
    assert unknown["webhook_id"] is None and unknown["source"] == "unknown"
    assert token_trust["source"] == "generic" and token_trust["disposition"] == "routed"

    text = server.log.read_text()
    for secret_text in (
        secret,
        signature,
        signature.split("=", 1)[1],
        MARKER,
        delivery,
        gh["ingest_url"].rsplit("/", 1)[1],
        gen["ingest_url"].rsplit("/", 1)[1],
    ):
        assert secret_text not in text, secret_text
    assert not [d for d in lines if "/webhooks/w/" in json.dumps(d)]  # never the path


def test_start_up_lines(server: Server) -> None:
    messages = [d["message"] for d in _lines(server, "switchboard.serve")]
    plugins = next(m for m in messages if m.startswith("plugins active: "))
    assert "rules " in plugins and "github " in plugins and "doorbell " in plugins
    assert "routing stages: rules, llm" in messages
    database = next(m for m in messages if m.startswith("database: "))
    assert "external" in database and "password" not in database
    serving = next(m for m in messages if m.startswith("serving on "))
    assert "/webhooks/w/<token:str>" in serving and "/mcp" in serving
    # A single-process server serves its metrics on their own address, not on its own.
    metrics_url = f"http://{METRICS['addr']}/metrics"
    assert f"metrics on {metrics_url}" in messages
    scraped = httpx.get(metrics_url, timeout=10)
    assert scraped.status_code == 200 and "switchboard_deliveries_total" in scraped.text
    assert httpx.get(server.base_url + "/metrics", timeout=10).status_code == 404


def test_config_level_is_honoured_without_the_flag(
    server_factory: Any, dsn: str, tmp_path: Path
) -> None:
    config = tmp_path / "quiet.toml"
    config.write_text('[log]\nlevel = "warning"\n')
    srv = server_factory(dsn, config=config)
    w = World(CLI(srv.env), direct=True)
    w.human("bob")
    w.endpoint("bob", "owner", sources="generic")
    hook = w.webhook("owner", "generic")
    assert httpx.post(hook["ingest_url"], content=b"{}").status_code == 202
    srv.stop()
    assert _lines(srv, "switchboard.delivery") == []
    assert _lines(srv, "switchboard.serve") == []


def _record(msg: str, **values: Any) -> logging.LogRecord:
    record = logging.LogRecord("switchboard.delivery", logging.INFO, __file__, 1, msg, None, None)
    for key, value in fields(**values).items():
        setattr(record, key, value)
    return record


def test_formatters_spell_the_fields_and_redact_them() -> None:
    token = "a" * 48
    record = _record(
        "delivery 401 unverified",
        status=401,
        verify_detail=f"got {token}",
        faults=["timeout", "error"],
        kind=None,
    )
    doc = json.loads(JsonFormatter().format(record))
    assert doc["message"] == "delivery 401 unverified" and doc["status"] == 401
    assert doc["faults"] == ["timeout", "error"] and doc["kind"] is None
    assert token not in doc["verify_detail"] and "redacted" in doc["verify_detail"]
    line = TextFormatter().format(
        _record(
            "delivery 401 unverified", status=401, verify_detail=f"got {token}", faults=["timeout"]
        )
    )
    assert "switchboard.delivery: delivery 401 unverified status=401" in line
    assert "faults=timeout" in line and token not in line


def test_a_producers_line_break_never_begins_a_line_of_its_own_in_text() -> None:
    """A kind or delivery id is the producer's text: in the text format a value with a line
    break (``\\n``, or one of Unicode's: U+0085, U+2028) or a quote is written quoted, with
    JSON's escapes, so it cannot forge a line; a plain token stays bare."""
    forged = "push\n2026-01-01 00:00:00 ERROR switchboard: forged"
    line = TextFormatter().format(
        _record(
            "delivery 202 routed",
            status=202,
            kind=forged,
            delivery_id='a"b\u2028c\x85d',
            queue="inbox",
        )
    )
    assert line.splitlines() == [line], line
    assert 'kind="push\\n2026' in line
    assert 'delivery_id="a\\"b\\u2028c\\u0085d"' in line
    assert "queue=inbox" in line


def test_the_delivery_line_redacts_what_the_producer_wrote_once() -> None:
    """The delivery line is formatted without a whole-line pass: ``observe`` redacts the
    producer's own words (its kind, the verifier's detail) before the line is built."""
    import io

    from switchboard.loghygiene import HygieneFilter
    from switchboard.service.observe import Observation, observe_delivery

    token = "b" * 48
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(HygieneFilter())
    logger = logging.getLogger("switchboard.delivery")
    old = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        observe_delivery(
            Observation(started=None, status=401, kind=f"push sbe_{token}",
                        verify_detail=f"Bearer {token}", source="generic"),
            0.0,
        )  # fmt: skip
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)
    doc = json.loads(stream.getvalue().splitlines()[-1])
    assert token not in stream.getvalue()
    assert doc["kind"] == "push sbe_«redacted»" and doc["status"] == 401
    assert "redacted" in doc["verify_detail"]


def test_summary_mode_sums_up_routine_deliveries_each_second(
    server_factory: Any, dsn: str, tmp_path: Path
) -> None:
    """``[log] deliveries = "summary"``: the 202s go into one line a second (and the last
    ones into a line at stop); a refusal, an unknown token and a faulted routing keep their
    own lines."""
    import time

    config = tmp_path / "summary.toml"
    config.write_text('[log]\nlevel = "info"\nformat = "json"\ndeliveries = "summary"\n')
    srv = server_factory(dsn, config=config)
    w = World(CLI(srv.env), direct=True)
    w.human("carol")
    w.endpoint("carol", "owner", sources="github,generic")
    gen = w.webhook("owner", "generic")
    gh = w.webhook("owner", "github")
    for n in range(5):
        posted = httpx.post(gen["ingest_url"], content=b'{"n": %d}' % n)
        assert posted.status_code == 202
    rules = tmp_path / "rules.json"
    rules.write_text(
        json.dumps(
            {
                "rules": [
                    {"id": "away", "expr": ".payload.n == 99", "action": {"drop": True}},
                    {
                        "id": "boom",
                        "expr": 'if .payload.n == 7 then error("boom") else false end',
                        "action": {"queue": "inbox"},
                    },
                ]
            }
        )
    )
    w.cli.json("webhook", "rules", "set", gen["webhook_id"], str(rules))
    faulted = httpx.post(gen["ingest_url"], content=b'{"n": 7}')
    assert faulted.status_code == 202
    assert httpx.post(gen["ingest_url"], content=b'{"n": 99}').status_code == 202
    assert httpx.post(gh["ingest_url"], content=b"{}").status_code == 401
    assert httpx.post(gen["ingest_url"] + "x", content=b"{}").status_code == 404
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any(
        d["message"].startswith("deliveries ") for d in _lines(srv, "switchboard.delivery")
    ):
        time.sleep(0.1)
    # While running: the window closed by its timer, not by the stop.
    first = [d for d in _lines(srv, "switchboard.delivery") if "deliveries" in d]
    assert first, "no summary line within 10 s"
    assert httpx.post(gen["ingest_url"], content=b'{"n": 100}').status_code == 202
    srv.stop()

    lines = _lines(srv, "switchboard.delivery")
    summaries = [d for d in lines if "deliveries" in d]
    alone = [d for d in lines if "deliveries" not in d]
    assert sorted(d["status"] for d in alone) == [202, 401, 404]
    assert next(d for d in alone if d["status"] == 202)["faults"]
    assert sum(d["deliveries"] for d in summaries) == 7
    routed = sum(d["dispositions"].get("routed", 0) for d in summaries)
    assert routed == 6 and sum(d["dispositions"].get("dropped", 0) for d in summaries) == 1
    assert sum(d["todos_created"] for d in summaries) == 6
    assert all(d["sources"] == {"generic": d["deliveries"]} for d in summaries)
    for d in summaries:
        assert d["message"].startswith(f"deliveries {d['deliveries']} in ")
        assert 0 <= d["latency_ms_p50"] <= d["latency_ms_max"]
        assert 0 <= d["route_ms_p50"] <= d["route_ms_max"] <= d["latency_ms_max"]
        assert 0 < d["record_ms_p50"] <= d["record_ms_max"] <= d["latency_ms_max"]
        assert d["level"] == "info"
    # the delivery after the timer's line is in the line written at stop
    assert summaries[-1]["deliveries"] >= 1 and len(summaries) >= 2


def test_summary_mode_is_validated(tmp_path: Path) -> None:
    from switchboard.config import load_config
    from switchboard.errors import SwitchboardError

    config = tmp_path / "bad.toml"
    config.write_text('[log]\ndeliveries = "sampled"\n')
    with pytest.raises(SwitchboardError) as caught:
        load_config(str(config))
    assert "deliveries" in str(caught.value)
