"""Over a real server and the real MCP client: presets installed beside it, imported
secrets, per-webhook hmac schemes, rotation overlap, and the CLI's --secret-file."""

from __future__ import annotations

import base64
import json
import secrets
import time
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import httpx
from sbmcp import agent
from sbpresets import PRESET_SOURCES
from sbtest import CLI, remember_secrets

from switchboard.config import load_config
from switchboard.plugin import HmacSource
from switchboard.runtime import Runtime
from switchboard.service import identity

#: A per-webhook scheme: Stripe's, written as data (what a user would paste).
STRIPE_LIKE = {
    "signature_header": "X-Acme-Signature",
    "signature_separator": ",",
    "signature_prefix": "v1=",
    "signed": "{t}.{body}",
    "timestamp": {"entry": "t="},
    "delivery_id": [{"pointer": "/id"}],
    "kind": [{"pointer": "/type"}, {"header": "X-Acme-Event"}],
}


def _secret() -> str:
    made = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
    remember_secrets({"signing_secret": made})
    return made


def _post(url: str, headers: dict[str, str], body: bytes) -> httpx.Response:
    return httpx.post(url, content=body, headers=headers, timeout=30)


async def test_presets_and_hmac_schemes_over_mcp_and_http(
    preset_site: Path,
    dsn: str,
    server_factory: Any,
    tmp_path: Path,
) -> None:
    srv = server_factory(dsn, env_extra={"PYTHONPATH": str(preset_site)})
    rt = Runtime(load_config(env=srv.env))
    await rt.open_store(migrate=False)
    try:
        await identity.add_human(rt, "alice")
        ep = await identity.vend_endpoint(
            rt,
            owner="alice",
            name="owner",
            queues=["inbox"],
            webhook_queues=["inbox"],
            source_types=[*PRESET_SOURCES, "hmac"],
            webhook_max=len(PRESET_SOURCES) + 4,
        )
        remember_secrets(ep)
    finally:
        await rt.shutdown()
    async with agent(srv.base_url + "/mcp", ep["token"]) as me:
        # every preset, with the producer's own secret: never shown back
        for preset in PRESET_SOURCES:
            mine = _secret()
            made = await me.call(
                "create_webhook", source_type=preset, target_queue="inbox", signing_secret=mine
            )
            assert made["signing_secret_imported"] is True and mine not in json.dumps(made)
            body = json.dumps(
                {"id": "evt_1", "event_id": "Ev1", "type": "thing.happened", "object_kind": "push"}
            ).encode()
            # the preset's own producer side signs (the server has it; so do we, from the site)
            module = next(e for e in entry_points(group="switchboard") if e.name == preset).load()
            signer = _preset_signer(module, preset)
            headers = signer.sign(
                body, mine.encode(), "thing.happened", delivery_id="d-1", now=time.time()
            )
            resp = _post(made["ingest_url"], headers, body)
            assert resp.status_code == 202, (preset, resp.text)
            assert resp.json()["verified"] is True
            if signer.scheme.mode == "token":  # the body is not signed: the token is wrong
                forged = {**headers, signer.scheme.signature_header: mine + "x"}
                resp = _post(made["ingest_url"], forged, body)
            else:
                resp = _post(made["ingest_url"], headers, body + b"x")
            assert resp.status_code == 401, preset

        # the hmac source: a scheme per webhook, validated with the field named
        bad = await me.fails(
            "create_webhook",
            source_type="hmac",
            target_queue="inbox",
            source_config={**STRIPE_LIKE, "encoding": "rot13"},
        )
        assert bad.code == "invalid_argument" and "source_config: encoding" in bad.text
        missing = await me.fails("create_webhook", source_type="hmac", target_queue="inbox")
        assert "signature_header" in missing.text
        acme_secret = _secret()
        acme = await me.call(
            "create_webhook",
            source_type="hmac",
            target_queue="inbox",
            signing_secret=acme_secret,
            source_config=STRIPE_LIKE,
        )
        assert acme["source_config"] == STRIPE_LIKE
        signer = HmacSource("hmac")
        event = json.dumps({"id": "evt_42", "type": "invoice.paid"}).encode()
        headers = signer.sign(
            event, acme_secret.encode(), None, now=time.time(), config=STRIPE_LIKE
        )
        assert headers["X-Acme-Signature"].startswith("t=")
        resp = _post(acme["ingest_url"], headers, event)
        assert resp.status_code == 202, resp.text
        again = _post(acme["ingest_url"], headers, event)  # a retry: the same evt_42
        assert [t["created"] for t in again.json()["todos"]] == [False]
        tampered = event.replace(b"invoice", b"invoyce")
        assert _post(acme["ingest_url"], headers, tampered).status_code == 401
        listed = await me.call("list_webhooks")
        mine_listed = {w["webhook_id"]: w for w in listed["webhooks"]}
        assert mine_listed[acme["webhook_id"]]["source_config"] == STRIPE_LIKE
        assert acme_secret not in json.dumps(listed)

        # rotation over MCP, importing the producer's next secret: both work for a while
        nxt = _secret()
        rotated = await me.call("rotate_webhook", webhook_id=acme["webhook_id"], signing_secret=nxt)
        assert rotated["previous_until"] and rotated["signing_secret_imported"] is True
        for n, key in ((1, acme_secret), (2, nxt)):
            event = json.dumps({"id": f"evt_r{n}", "type": "invoice.paid"}).encode()
            headers = signer.sign(event, key.encode(), None, now=time.time(), config=STRIPE_LIKE)
            resp = _post(rotated["ingest_url"], headers, event)
            assert resp.status_code == 202, (n, resp.text)
        listed = await me.call("list_webhooks")
        assert {w["webhook_id"]: w for w in listed["webhooks"]}[acme["webhook_id"]][
            "previous_until"
        ]

    # the CLI: --source-config @FILE and --secret-file, the same service underneath
    scheme = tmp_path / "scheme.json"
    scheme.write_text(json.dumps(STRIPE_LIKE))
    secret_file = tmp_path / "secret.txt"
    cli_secret = _secret()
    secret_file.write_text(cli_secret + "\n")
    out = CLI(srv.env).json(
        "webhook",
        "create",
        "--endpoint",
        ep["endpoint_id"],
        "--source",
        "hmac",
        "--target-queue",
        "inbox",
        "--source-config",
        f"@{scheme}",
        "--secret-file",
        str(secret_file),
    )
    assert out["signing_secret_imported"] is True and cli_secret not in json.dumps(out)
    event = json.dumps({"id": "evt_cli", "type": "invoice.paid"}).encode()
    headers = HmacSource("hmac").sign(
        event, cli_secret.encode(), None, now=time.time(), config=STRIPE_LIKE
    )
    assert _post(out["ingest_url"], headers, event).status_code == 202


def _preset_signer(module: Any, name: str) -> Any:
    """The preset's source object, as its plugin registers it."""
    from switchboard.registry import SourceRegistry

    registry = SourceRegistry()
    module.switchboard_register_sources(register=registry)
    return registry.get(name)
