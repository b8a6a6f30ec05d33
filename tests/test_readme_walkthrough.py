"""The README's walkthrough cannot rot: its ``rules.json`` and its Python MCP client, taken
from the README as printed, run against a real server and turn the cairn handoff fixture
into pool-m's ``handoff`` todo."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
from sbmcp import agent
from sbtest import Server, remember_secrets
from sbworld import World, on_runtime

from switchboard.cli.send import build_request
from switchboard.service import webhooks

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
ARTIFACT = (ROOT / "tests" / "fixtures" / "cairn_artifact_created.json").read_bytes()


def readme_block(name: str) -> str:
    """The fenced block right after ``<!-- walkthrough:NAME ... -->`` in the README."""
    found = re.search(
        r"<!-- walkthrough:" + re.escape(name) + r"\b[^>]*-->\n```\w*\n(.*?)```", README, re.S
    )
    assert found, f"README has no walkthrough block {name}"
    return found.group(1)


def rules_json(pool_id: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(readme_block("rules.json").replace("POOL_M_ID", pool_id))
    return doc


class Tenant:
    """The walkthrough's setup on the module's server: alice's router and pool-m, a cairn
    webhook routed to pool-m (the warning checked), one stamped delivery stored."""

    def __init__(self, srv: Server, prefix: str) -> None:
        from sbtest import CLI

        self.srv = srv
        self.w = World(CLI(srv.env), prefix=prefix, direct=True)
        self.w.human("alice")
        self.router = self.w.endpoint(
            "alice",
            "router",
            queues="inbox",
            webhook_queues="inbox",
            sources="cairn,github,generic",
            webhook_max=4,
        )
        self.pool = self.w.endpoint(
            "alice", "pool-m", queues="handoff", webhook_queues="", sources="", webhook_max=0
        )
        self.pool_id = str(self.pool["endpoint_id"])

        async def create(rt: Any) -> dict[str, Any]:
            owner = await rt.store.get_endpoint(self.router["endpoint_id"])
            hook = await webhooks.create_webhook(rt, owner, "cairn", "inbox")
            route = await webhooks.add_route(rt, None, hook["webhook_id"], self.pool_id)
            return {"hook": hook, "route": route}

        made = on_runtime(srv.env, create)
        remember_secrets(made)
        self.hook = made["hook"]
        [warning] = made["route"]["warnings"]
        assert (warning["endpoint_id"], warning["queue"]) == (self.pool_id, "inbox")
        self.wid = str(self.hook["webhook_id"])
        reply = self.send()
        assert sorted(t["queue"] for t in reply["todos"]) == ["inbox", "inbox"]

    def send(self) -> dict[str, Any]:
        """``switchboard send --source cairn --stamp`` of the fixture, as the README runs it."""
        body, headers = build_request(
            "cairn", ARTIFACT, self.hook["signing_secret"].encode(), None, [], True
        )
        resp = httpx.post(self.hook["ingest_url"], content=body, headers=headers, timeout=30)
        assert resp.status_code == 202, resp.text
        return dict(resp.json())

    @property
    def url(self) -> str:
        return self.srv.base_url + "/mcp"


async def test_the_readme_rule_routes_the_handoff_to_the_pool(module_server: Server) -> None:
    t = Tenant(module_server, "rule-")
    config = rules_json(t.pool_id)
    async with agent(t.url, t.router["token"]) as me:
        # The pool's inbox todo, which no one can claim, is shown to the webhook's owner.
        [stranded] = (await me.call("list_todos", unreachable=True))["todos"]
        assert (stranded["endpoint_id"], stranded["queue"]) == (t.pool_id, "inbox")
        assert stranded["webhook_id"] == t.wid

        [event] = (await me.call("list_webhook_events", webhook_id=t.wid))["events"]
        dry = await me.call(
            "test_webhook_rules", webhook_id=t.wid, event_id=event["event_id"], **config
        )
        assert dry["decision"] == {"drop": False, "queue": "handoff", "endpoints": [t.pool_id]}
        assert dry["trace"]["rule_id"] == "handoff-lane-m"
        saved = await me.call("set_webhook_rules", webhook_id=t.wid, **config)
        assert [r["id"] for r in saved["rules"]] == ["handoff-lane-m"]
        assert saved["warnings"] == []

    reply = t.send()
    assert [(x["endpoint_id"], x["queue"]) for x in reply["todos"]] == [(t.pool_id, "handoff")]
    async with agent(t.url, t.pool["token"]) as pool:
        got = await pool.call("claim_next")
        assert got["todo"]["id"] == reply["todos"][0]["id"]
        assert got["todo"]["payload"]["artifact"]["tags"] == [
            "handoff",
            "lane:m",
            "reply:cairn-comment",
        ]


def test_the_readme_python_client_runs_as_printed(module_server: Server, tmp_path: Path) -> None:
    t = Tenant(module_server, "snippet-")
    (tmp_path / "rules.json").write_text(json.dumps(rules_json(t.pool_id)))
    (tmp_path / "rules.py").write_text(readme_block("rules.py"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
    env.update(SWITCHBOARD_MCP_URL=t.url, SWITCHBOARD_MCP_TOKEN=t.router["token"], WEBHOOK_ID=t.wid)
    proc = subprocess.run(
        [sys.executable, "rules.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith('dry run: {"drop": false, "queue": "handoff", "endpoints": ')
    assert '"rule_id": "handoff-lane-m"' in lines[0]
    assert lines[1] == "saved: ['handoff-lane-m'] warnings: []"
    reply = t.send()
    assert [(x["endpoint_id"], x["queue"]) for x in reply["todos"]] == [(t.pool_id, "handoff")]
