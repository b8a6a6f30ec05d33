"""A delivery that waits for its deferred stage, in the console: counted, and how long the
oldest has waited, on the webhook page, its row and its own page (issue 35).

The delivery is taken in by an in-process runtime whose llm stage is deferred; the console's
server runs no llm plugin (disabled), so no triage worker ever decides it: it stays pending, for sure.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from sbllm import API_KEY, KEY_ENV, QUEUES, llm_toml
from sbtest import CLI, Server
from sbworld import World, on_runtime

from switchboard.service import webhooks
from switchboard.service.ingest import ingest
from switchboard.sources import Headers


@pytest.fixture(scope="module")
def seeded(module_server_factory: Any, module_dsn: str, tmp_path_factory: Any) -> dict[str, Any]:
    plain = tmp_path_factory.mktemp("console") / "sb.toml"
    plain.write_text('disabled_plugins = ["llm"]\n')  # no triage worker in this server
    srv: Server = module_server_factory(module_dsn, config=plain)
    w = World(CLI(srv.env).fast(), prefix="w-", direct=True)
    w.human("pat")
    w.endpoint("pat", "owner", queues="inbox", webhook_queues="inbox,triage,review")
    config = tmp_path_factory.mktemp("deferred") / "sb.toml"
    # a provider no one listens on: nothing is ever asked
    config.write_text(llm_toml("http://127.0.0.1:9/v1", mode="deferred"))
    env = {**srv.env, "SWITCHBOARD_CONFIG": str(config), KEY_ENV: API_KEY}

    async def seed(rt: Any) -> dict[str, Any]:
        from switchboard_llm import service

        owner = w.endpoints["owner"]["endpoint_id"]
        await service.set_triage(
            rt, owner, {"provider": "fake", "model": "m", "queues": QUEUES, "timeout_ms": 1500}
        )
        hook = await webhooks.create_webhook(
            rt, await rt.store.get_endpoint(owner), "generic", "inbox"
        )
        token = hook["ingest_url"].rsplit("/", 1)[1]
        reply = await ingest(
            rt, token, Headers({"X-Delivery-Id": "d1"}), b'{"title": "x"}', "application/json"
        )
        assert reply.status == 202, reply.body
        row = await rt.store.db.fetchone(
            "SELECT id, disposition FROM events WHERE webhook_id = %s", (hook["webhook_id"],)
        )
        assert row["disposition"] == "pending"
        return {"hook": hook["webhook_id"], "event": str(row["id"])}

    return {"base": srv.base_url, "world": w, **on_runtime(env, seed)}


def test_a_pending_delivery_shows_how_long_it_has_waited(
    page: Any, seeded: Any, shots: Path
) -> None:
    page.goto("/console/signin")
    page.fill("#token", str(seeded["world"].endpoints["owner"]["token"]))
    page.click("form.signin button[type=submit]")
    page.wait_for_url("**/console/webhooks")
    page.goto(f"/console/webhooks/{seeded['hook']}")
    waiting = page.text_content("#waiting")
    assert re.search(r"1 pending \(the oldest has waited \d+ (s|min)\)", waiting), waiting
    assert "0 held" in waiting
    row = page.locator("tr.delivery")
    assert row.locator("td.disposition").text_content() == "pending"
    assert re.search(
        r"waiting for llm \(waiting \d+ (s|min)\)", row.locator("td.decided").text_content()
    )
    page.click("#pending-count")
    assert page.locator("tr.delivery").count() == 1
    page.goto(f"/console/deliveries/{seeded['event']}")
    assert re.fullmatch(r"\(waiting for \d+ (s|min)\)", page.text_content("#waited"))
    assert "Waiting for the deferred llm stage" in page.text_content("#trace")
    page.screenshot(path=str(shots / "console-pending.png"), full_page=True)
