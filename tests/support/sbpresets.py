"""Shared steps of the preset tests: fixtures, a signed delivery end to end, forgeries."""

from __future__ import annotations

import configparser
import json
from importlib import resources
from pathlib import Path
from typing import Any

from switchboard.runtime import Runtime
from switchboard.service import identity, webhooks
from switchboard.service.ingest import IngestReply, ingest
from switchboard.sources import Delivery, Headers, Verification

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"
#: Every preset distribution: a directory under plugins/ with its own setup.cfg.
PRESETS = sorted(p for p in PLUGINS.glob("switchboard-*") if (p / "setup.cfg").is_file())


def _entry_point_names(setup_cfg: Path) -> list[str]:
    cfg = configparser.ConfigParser()
    cfg.read(setup_cfg, encoding="utf-8")
    lines = cfg.get("options.entry_points", "switchboard", fallback="").splitlines()
    return [line.split("=", 1)[0].strip() for line in lines if "=" in line]


#: The source each preset registers (a preset's source is named as its entry point).
PRESET_SOURCES = sorted(name for p in PRESETS for name in _entry_point_names(p / "setup.cfg"))


def fixture(package: str, name: str) -> tuple[dict[str, str], bytes]:
    """A preset's recorded delivery: its headers and its body, byte for byte."""
    files = resources.files(package) / "fixtures"
    headers = json.loads((files / f"{name}.headers.json").read_text(encoding="utf-8"))
    return headers, (files / f"{name}.json").read_bytes()


def source(rt: Runtime, name: str) -> Any:
    found = rt.registries.sources.get(name)
    assert found is not None, f"preset {name!r} is not installed"
    return found


def verify(
    src: Any, headers: dict[str, str], body: bytes, secret: bytes | str, now: float
) -> Verification:
    key = secret.encode() if isinstance(secret, str) else secret
    return src.verify(Delivery(Headers(headers), body, headers.get("content-type")), key, now)


async def owner(rt: Runtime, source_type: str) -> dict[str, Any]:
    """alice's endpoint, allowed webhooks of ``source_type`` into ``inbox``."""
    await identity.add_human(rt, "alice")
    made = await identity.vend_endpoint(
        rt,
        owner="alice",
        name="owner",
        queues=["inbox"],
        webhook_queues=["inbox"],
        source_types=[source_type],
        webhook_max=4,
    )
    endpoint: dict[str, Any] = await rt.store.get_endpoint(made["endpoint_id"])
    return endpoint


def token_of(created: dict[str, Any]) -> str:
    return str(created["ingest_url"]).rsplit("/", 1)[1]


async def post(rt: Runtime, token: str, headers: dict[str, str], body: bytes) -> IngestReply:
    return await ingest(
        rt,
        token,
        Headers(headers),
        body,
        headers.get("Content-Type") or headers.get("content-type"),
    )


async def trace_of(rt: Runtime, webhook_id: str) -> list[dict[str, Any]]:
    """Each stored event's routing trace, oldest first."""
    rows = await rt.store.db.fetchall(
        "SELECT routing_trace FROM events WHERE webhook_id = %s ORDER BY received_at", (webhook_id,)
    )
    return [dict(r["routing_trace"]) for r in rows]


async def create(rt: Runtime, source_type: str, secret: str | None) -> dict[str, Any]:
    """A webhook of the preset, with the producer's ``secret`` imported (or one minted)."""
    ep = await owner(rt, source_type)
    return await webhooks.create_webhook(rt, ep, source_type, "inbox", signing_secret=secret)
