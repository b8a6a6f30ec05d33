"""A third party's plugin (tests/plugins/hello, written from switchboard.plugin alone), installed
like any package and driven through the real CLI, server, receiver and MCP surface."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from sbmcp import agent
from sbnotify import heard
from sbtest import CLI, HELLO, Server, install_hello, make_env, scrape
from sbworld import World

from switchboard.plugin import SinkEvent


@pytest.fixture(scope="module")
def hello_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("hello")
    try:
        yield install_hello(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def with_hello(site: Path) -> dict[str, str]:
    """The environment entries that make a child process see the installed plugin."""
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path}


@pytest.fixture
def hello_cli(hello_site: Path, dsn: str, tmp_path: Path) -> CLI:
    return CLI(make_env(dsn, tmp_path / "data", **with_hello(hello_site)))


def test_the_readme_example_is_the_tested_plugin() -> None:
    """Each README block headed by a file of tests/plugins/hello is a part of that file."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Writing a plugin\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```\w*\n# (\S+)\n(.*?)```", section, flags=re.S)
    shown = {path for path, _ in blocks if (HELLO / path).is_file()}
    assert {"pyproject.toml", "switchboard_hello/acme.py", "switchboard_hello/__init__.py"} <= shown
    for path, text in blocks:
        if path in shown:
            assert text in (HELLO / path).read_text(encoding="utf-8"), f"README: {path} differs"


# -- discovery, config, migrations, disabling ----------------------------------------------


def test_third_party_plugin_is_listed_and_its_hooks_run(
    hello_cli: CLI, dsn: str, tmp_path: Path
) -> None:
    listed = {p["name"]: p for p in hello_cli.json("plugins")}
    hello = listed["hello"]
    assert hello["distribution"] == "switchboard-hello"
    assert hello["version"] == "1.2.3"
    assert {
        "switchboard_register_commands",
        "switchboard_migrations",
        "switchboard_register_sources",
    } <= set(hello["hooks"])

    # The command was registered with the plugin's own section, defaults filled in.
    assert hello_cli.json("hello")["greeting"] == "hello"
    config = tmp_path / "sb.toml"
    config.write_text('[plugins.hello]\ngreeting = "ahoy"\n')
    out = hello_cli.json("--config", str(config), "hello")
    assert out["greeting"] == "ahoy"
    assert {"cairn", "acme"} <= set(out["sources"])

    # Its migration is applied under its own name.
    applied = hello_cli.json("migrate")["applied"]
    assert applied == ["hello/0001_hello.sql"]
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM hello_marks").fetchone() == (0,)


def test_plugin_config_is_validated_by_its_schema(hello_cli: CLI, tmp_path: Path) -> None:
    config = tmp_path / "sb.toml"
    config.write_text("[plugins.hello]\ngreeting = 42\n")
    proc = hello_cli.run("--config", str(config), "plugins", check=False)
    assert proc.returncode == 2
    assert "plugins.hello.greeting" in proc.stderr


def test_plugin_checks_its_section_at_load_named_in_the_config_file(
    hello_cli: CLI, tmp_path: Path
) -> None:
    """A third party's ``switchboard_check_config``: refused at load, before serve starts
    anything, the file and the key in front of the plugin's own words."""
    config = tmp_path / "sb.toml"
    config.write_text('[plugins.hello]\nsink_path = "events.jsonl"\n')
    for argv in (["plugins"], ["serve", "--port", "0"]):
        proc = hello_cli.run("--config", str(config), *argv, check=False)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip() == (
            f"switchboard: error: config file {config}: plugins.hello.sink_path:"
            " must be an absolute path (got 'events.jsonl')"
        )
    config.write_text(f'[plugins.hello]\nsink_path = "{tmp_path / "events.jsonl"}"\n')
    assert "hello" in {p["name"] for p in hello_cli.json("--config", str(config), "plugins")}


def test_disabled_plugins_are_not_loaded(hello_cli: CLI, tmp_path: Path) -> None:
    config = tmp_path / "sb.toml"
    config.write_text('disabled_plugins = ["hello", "github"]\n')
    names = {p["name"] for p in hello_cli.json("--config", str(config), "plugins")}
    assert "hello" not in names and "github" not in names and "gitea" in names
    proc = hello_cli.run("--config", str(config), "hello", check=False)
    assert proc.returncode == 2  # argparse: no such command


# -- the acme source end to end --------------------------------------------------------------

RULES: list[dict[str, Any]] = [
    {"id": "ping", "expr": '.kind == "ping"', "action": {"drop": True}},
    {
        "id": "urgent",
        "name": "urgent tickets",
        "expr": '.kind == "ticket.opened" and .acme.priority == "urgent"',
        "action": {"queue": "triage"},
    },
]
URGENT = json.dumps(
    {
        "type": "ticket.opened",
        "id": "T-1",
        "title": "Printer on fire",
        "priority": "urgent",
        "labels": ["office"],
    }
).encode()
LOW = json.dumps(
    {"type": "ticket.opened", "id": "T-2", "title": "Low toner", "priority": "low"}
).encode()
PING = json.dumps({"type": "ping"}).encode()


def acme_headers(secret: str, body: bytes, delivery: str) -> dict[str, str]:
    """What Acme sends, computed here independently of the plugin."""
    signature = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {
        "Content-Type": "application/json",
        "X-Acme-Id": delivery,
        "X-Acme-Signature": signature,
    }


def _rows(dsn: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return list(conn.execute(sql, args).fetchall())


async def _sink_lines(path: Path, count: int) -> list[dict[str, Any]]:
    """The sink's lines once ``count`` have arrived (sinks run after the response)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        lines = path.read_text().splitlines() if path.exists() else []
        if len(lines) >= count:
            return [json.loads(line) for line in lines]
        await asyncio.sleep(0.1)
    raise AssertionError(f"the sink wrote {len(lines)} of {count} lines")


@pytest.fixture
def acme_world(
    hello_site: Path, server_factory: Any, dsn: str, tmp_path: Path
) -> tuple[Server, World, dict[str, Any], Path]:
    """A server with hello installed, its sinks on (one called after commit, one rung at
    commit on ``acme_ready``) and its stage before ``rules``."""
    sink = tmp_path / "sink.jsonl"
    config = tmp_path / "sb.toml"
    config.write_text(
        f'[routing]\nstages = ["hello", "rules"]\n\n'
        f"[plugins.hello]\nsink_path = {json.dumps(str(sink))}\n"
        'bell_channel = "acme_ready"\n'
    )
    srv = server_factory(dsn, config=config, env_extra=with_hello(hello_site))
    w = World(CLI(srv.env))
    w.human("alice")
    w.endpoint(
        "alice",
        "owner",
        queues="inbox,triage",
        webhook_queues="inbox,triage",
        sources="acme,generic",
    )
    hook = w.webhook("owner", "acme")
    return srv, w, hook, sink


async def test_acme_source_live_dry_runs_send_and_sink(
    acme_world: tuple[Server, World, dict[str, Any], Path],
    dsn: str,
    tmp_path: Path,
) -> None:
    srv, w, hook, sink = acme_world
    bell = psycopg.connect(dsn, autocommit=True)
    bell.execute("LISTEN acme_ready")
    owner = w.endpoints["owner"]
    secret = hook["signing_secret"]
    wid = hook["webhook_id"]
    assert hook["trust_mode"] == "signed"

    async with agent(srv.base_url + "/mcp", owner["token"]) as me:
        # The plugin's MCP tool, registered with its section's default greeting.
        assert (await me.call("hello"))["greeting"] == f"hello, {owner['endpoint_id']}"
        # The hello stage validates its own part of a config, on save as in dry runs.
        refused = (
            await me.fails("set_webhook_rules", webhook_id=wid, rules=RULES, params={"hello": 1})
        ).text
        assert refused.startswith("invalid_params:") and "params.hello" in refused
        await me.call("set_webhook_rules", webhook_id=wid, rules=RULES)

        # (a) Live: a correctly signed delivery is routed by a rule on .acme ...
        resp = httpx.post(
            hook["ingest_url"],
            content=URGENT,
            headers=acme_headers(secret, URGENT, "d-1"),
            timeout=30,
        )
        assert resp.status_code == 202, resp.text
        live = resp.json()
        assert live["verified"] is True and live["trust_mode"] == "signed"
        assert [(t["endpoint_id"], t["queue"]) for t in live["todos"]] == [
            (owner["endpoint_id"], "triage")
        ]
        # ... and its todo is titled by the projection's title_key.
        claimed = (await me.call("claim_next", queue="triage"))["todo"]
        assert claimed["title"] == "Printer on fire"
        assert claimed["payload"]["acme"]["labels"] == ["office"]
        [(event_id, kind, trace, disposition)] = _rows(
            dsn, "SELECT id::text, kind, routing_trace, disposition FROM events"
        )
        assert kind == "ticket.opened" and disposition == "routed"
        assert trace["rule_id"] == "urgent"
        # The plugin's bell was rung by the write's own transaction: heard by now.
        assert heard(bell) == [("acme_ready", f"{owner['endpoint_id']}:triage")]
        again = httpx.post(
            hook["ingest_url"],
            content=URGENT,
            headers=acme_headers(secret, URGENT, "d-1"),
            timeout=30,
        ).json()
        assert again["created"] == 0  # the same todo, not created again: no bell
        assert [t["id"] for t in again["todos"]] == [t["id"] for t in live["todos"]]

        # A bad or missing signature is a 401 and stores nothing.
        forged = acme_headers("not-the-secret", URGENT, "d-2")
        assert (
            httpx.post(hook["ingest_url"], content=URGENT, headers=forged, timeout=30).status_code
            == 401
        )
        unsigned = {
            k: v for k, v in acme_headers(secret, URGENT, "d-2").items() if k != "X-Acme-Signature"
        }
        assert (
            httpx.post(hook["ingest_url"], content=URGENT, headers=unsigned, timeout=30).status_code
            == 401
        )
        # A drop is stored, never handed to a sink.
        dropped = httpx.post(
            hook["ingest_url"], content=PING, headers=acme_headers(secret, PING, "d-3"), timeout=30
        ).json()
        assert dropped["dropped"] is True
        assert _rows(dsn, "SELECT count(*) FROM events") == [(2,)]

        # (c) MCP dry run over a sample: the same decision, kind and trace as live, and
        # verified as a correctly signed delivery shows.
        sample = await me.call(
            "test_webhook_rules",
            webhook_id=wid,
            payload=URGENT.decode(),
            headers=acme_headers(secret, URGENT, "sample"),
        )
        assert sample["decision"] == {
            "drop": False,
            "queue": "triage",
            "endpoints": [owner["endpoint_id"]],
        }
        assert sample["trace"] == trace
        assert sample["envelope"]["kind"] == "ticket.opened"
        assert sample["envelope"]["verified"] is True
        assert sample["envelope"]["acme"]["title"] == "Printer on fire"
        # The stored delivery replays to the same decision.
        replay = await me.call("test_webhook_rules", webhook_id=wid, event_id=event_id)
        assert replay["decision"] == sample["decision"] and replay["trace"] == trace

    # (b) `rules test` offline, within the webhook's grant: the same decision and trace.
    rules_file = tmp_path / "rules.json"
    rules_file.write_text(json.dumps({"rules": RULES}))
    headers_file = tmp_path / "headers.json"
    headers_file.write_text(json.dumps({"X-Acme-Id": "offline"}))
    grant_file = tmp_path / "grant.json"
    grant_file.write_text(
        json.dumps(
            {
                "target_queue": "inbox",
                "queues": ["inbox", "triage"],
                "endpoints": [owner["endpoint_id"]],
            }
        )
    )
    offline = w.cli.json(
        "rules",
        "test",
        str(rules_file),
        "--source",
        "acme",
        "--payload",
        URGENT.decode(),
        "--headers",
        str(headers_file),
        "--grant",
        str(grant_file),
    )
    assert offline["decision"] == sample["decision"]
    assert offline["trace"] == trace
    assert offline["envelope"]["kind"] == "ticket.opened"
    assert offline["envelope"]["verified"] is True
    bad_params = tmp_path / "bad.json"
    bad_params.write_text(json.dumps({"rules": RULES, "params": {"hello": 1}}))
    proc = w.cli.run("rules", "check", str(bad_params), "--grant", str(grant_file), check=False)
    assert (
        proc.returncode == 2
        and json.loads(proc.stderr.splitlines()[-1])["error"]["code"] == "invalid_params"
    )

    # (d) `switchboard send --source acme` signs as Acme does and the server accepts it.
    body_file = tmp_path / "low.json"
    body_file.write_bytes(LOW)
    secret_file = tmp_path / "secret"
    secret_file.write_text(secret + "\n")
    sent = w.cli.json(
        "send",
        "--url",
        hook["ingest_url"],
        "--source",
        "acme",
        "--secret",
        f"@{secret_file}",
        str(body_file),
    )
    assert sent["status"] == 202 and sent["response"]["verified"] is True
    assert [t["queue"] for t in sent["response"]["todos"]] == ["inbox"]
    wrong = w.cli.run(
        "send",
        "--url",
        hook["ingest_url"],
        "--source",
        "acme",
        "--secret",
        "wrong-secret",
        str(body_file),
        check=False,
    )
    assert wrong.returncode == 1 and json.loads(wrong.stdout)["status"] == 401

    # The bell rang for the sent delivery only: never for the redelivery, the drop, the 401s
    # or the dry runs; the host's series for it says so on /metrics, and the plugin's
    # callback was told as much.
    assert heard(bell) == [("acme_ready", f"{owner['endpoint_id']}:inbox")]
    bell.close()
    rings = scrape(srv.base_url + "/metrics")
    assert rings[("switchboard_sink_rings_total", (("sink", "acme-bell"),))] == 2

    # (e) The sink got each routed event (never the drop) with the documented keys.
    first, second = await _sink_lines(sink, 2)
    assert first == {
        "id": event_id,
        "kind": "ticket.opened",
        "webhook_id": wid,
        "disposition": "routed",
        "todos": [live["todos"][0]["id"]],
        "keys": sorted(SinkEvent.__required_keys__ | SinkEvent.__optional_keys__),
        "title": "Printer on fire",
    }
    assert second["todos"] == [t["id"] for t in sent["response"]["todos"]]
    assert second["kind"] == "ticket.opened" and second["title"] == "Low toner"

    # Start-up ran in the server, and the never-deciding stage saw every routed delivery
    # (four live, one of them a redelivery, and two MCP dry runs) without deciding any.
    status = httpx.get(srv.base_url + "/hello", timeout=10).json()
    assert status["state"]["started"] is True and "acme" in status["state"]["sources"]
    assert status["stage_seen"] == 6
    assert status["bells_rung"] == 2
