"""An endpoint's llm_triage is validated at save (schema, provider, ceilings, grant), and the
model's answer strictly; the plugin is written against the public contract alone."""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Any

import pytest
from sbllm import QUEUES, Tenant
from switchboard_llm import service
from switchboard_llm.settings import ANSWER_SCHEMA, TRIAGE_SCHEMA, answer_schema
from switchboard_llm.stage import InvalidAnswer, parse_answer

from switchboard.errors import InvalidArgument, NotFound
from switchboard.service import identity

PLUGIN = Path(__file__).resolve().parents[3] / "plugins" / "switchboard_llm"


def _doc(**overrides: Any) -> dict[str, Any]:
    return {"provider": "fake", "model": "m", "queues": QUEUES, **overrides}


async def test_a_saved_config_has_its_defaults_and_reads_back(tenant: Tenant) -> None:
    t = tenant
    view = await service.get_triage(t.rt, t.owner)
    assert view == {
        "endpoint_id": t.owner,
        "llm_triage": None,
        "enabled": True,
        "providers": ["fake", "static"],
        "granted_queues": ["inbox", "triage", "review"],
        "usage": {"minute": 0, "day": 0},
        "tokens": {"minute": 0, "day": 0},
        "mode": "inline",
        "pending": 0,
    }
    saved = await service.set_triage(t.rt, t.owner, _doc())
    assert saved["llm_triage"] == {
        "provider": "fake",
        "model": "m",
        "queues": QUEUES,
        "min_confidence": 0.7,
        "prompt_budget_per_minute": 10,
        "prompt_budget_per_day": 500,
        "on_budget": "default",
        "include_payload": False,
        "timeout_ms": 5000,
    }
    assert (await service.get_triage(t.rt, t.owner))["llm_triage"] == saved["llm_triage"]
    cleared = await service.set_triage(t.rt, t.owner, None)
    assert cleared["llm_triage"] is None
    # Clearing twice is fine.
    assert (await service.set_triage(t.rt, t.owner, None))["llm_triage"] is None


REFUSED: dict[str, tuple[Any, str]] = {
    "not an object": ([], "llm_triage: must be an object (got a list)"),
    "missing model": ({"provider": "fake", "queues": QUEUES}, "llm_triage.model: is required"),
    "unknown key": (_doc(temperature=1), "llm_triage.temperature: unknown key"),
    "no queues": (_doc(queues=[]), "llm_triage.queues: must not be empty"),
    "queue without description": (
        _doc(queues=[{"name": "triage"}]),
        "llm_triage.queues[0].description: is required",
    ),
    "confidence over 1": (_doc(min_confidence=1.5), "llm_triage.min_confidence: must be at most 1"),
    "string budget": (
        _doc(prompt_budget_per_minute="5"),
        "llm_triage.prompt_budget_per_minute: must be an integer (got a string)",
    ),
    "unknown provider": (
        _doc(provider="gpt"),
        "llm_triage.provider: unknown provider 'gpt' (offered: fake, static)",
    ),
    "over the minute ceiling": (
        _doc(prompt_budget_per_minute=61),
        "llm_triage.prompt_budget_per_minute: at most 60",
    ),
    "over the day ceiling": (
        _doc(prompt_budget_per_day=5001),
        "llm_triage.prompt_budget_per_day: at most 5000",
    ),
    "over the timeout ceiling": (_doc(timeout_ms=5001), "llm_triage.timeout_ms: at most 5000"),
    "a queue twice": (
        _doc(queues=[QUEUES[0], QUEUES[0]]),
        "llm_triage.queues[1].name: 'triage' is listed twice",
    ),
    "a queue not granted": (
        _doc(queues=[{"name": "payroll", "description": "pay"}]),
        "llm_triage.queues[0].name: 'payroll' is not a queue",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
async def test_a_bad_config_is_refused_naming_the_key(case: str, tenant: Tenant) -> None:
    doc, message = REFUSED[case]
    with pytest.raises(InvalidArgument) as caught:
        await service.set_triage(tenant.rt, tenant.owner, doc)
    assert str(caught.value).startswith(message), str(caught.value)
    if case == "a queue not granted":
        assert caught.value.code == "not_granted"
    assert (await service.get_triage(tenant.rt, tenant.owner))["llm_triage"] is None


async def test_the_grant_includes_the_humans_other_endpoints(tenant: Tenant) -> None:
    t = tenant
    t.w.endpoint("alice", "pool", queues="lane-m")
    view = await service.get_triage(t.rt, t.owner)
    assert view["granted_queues"] == ["inbox", "triage", "review", "lane-m"]
    saved = await service.set_triage(
        t.rt, t.owner, _doc(queues=[{"name": "lane-m", "description": "medium work"}])
    )
    assert saved["llm_triage"]["queues"][0]["name"] == "lane-m"


async def test_an_unknown_endpoint_is_not_found(tenant: Tenant) -> None:
    for bad in ("00000000-0000-0000-0000-000000000000", "not-a-uuid"):
        with pytest.raises(NotFound):
            await service.get_triage(tenant.rt, bad)
        with pytest.raises(NotFound):
            await service.set_triage(tenant.rt, bad, _doc())


async def test_settings_outlive_revocation_and_go_with_the_endpoint_row(tenant: Tenant) -> None:
    """Revocation keeps the row (and its settings, inert: no webhook of it delivers);
    deleting the endpoint row drops them."""
    t = tenant
    await service.set_triage(t.rt, t.owner, _doc())
    await identity.revoke_endpoint(t.rt, t.owner)
    assert (await service.get_triage(t.rt, t.owner))["llm_triage"] is not None
    async with t.rt.store.db.conn() as conn:
        await conn.execute("DELETE FROM endpoints WHERE id = %s", (t.owner,))
        cur = await conn.execute(
            "SELECT count(*) AS n FROM llm_triage WHERE endpoint_id = %s", (t.owner,)
        )
        assert (await cur.fetchone()) == {"n": 0}


# -- the model's answer ------------------------------------------------------------------


def test_a_valid_answer_parses() -> None:
    assert parse_answer(' {"queue": "q", "confidence": 1, "reason": "r"}\n') == {
        "queue": "q",
        "confidence": 1,
        "reason": "r",
    }
    assert parse_answer('{"reason": "", "confidence": 0.0, "queue": "q"}')["confidence"] == 0


@pytest.mark.parametrize(
    "text",
    [
        "",
        "triage",
        '{"queue": "q", "confidence": 0.9}',
        '{"queue": "q", "confidence": 0.9, "reason": "r", "extra": true}',
        '{"queue": "q", "confidence": 1.01, "reason": "r"}',
        '{"queue": "q", "confidence": -0.1, "reason": "r"}',
        '{"queue": "q", "confidence": "0.9", "reason": "r"}',
        '{"queue": "q", "confidence": true, "reason": "r"}',
        '{"queue": "q", "confidence": NaN, "reason": "r"}',
        '{"queue": 7, "confidence": 0.9, "reason": "r"}',
        '{"queue": "q", "confidence": 0.9, "reason": null}',
        '{"queue": "q", "queue": "p", "confidence": 0.9, "reason": "r"}',
        '[{"queue": "q", "confidence": 0.9, "reason": "r"}]',
        '```json\n{"queue": "q", "confidence": 0.9, "reason": "r"}\n```',
        '{"queue": "q", "confidence": 0.9, "reason": "r"} and more',
        "[" * 100000,
    ],
)
def test_anything_else_is_an_invalid_answer(text: str) -> None:
    with pytest.raises(InvalidAnswer):
        parse_answer(text)


def test_the_schema_sent_to_the_model_enumerates_the_queues() -> None:
    schema = answer_schema(["a", "b"])
    assert schema["properties"]["queue"] == {"type": "string", "enum": ["a", "b"]}
    assert schema["required"] == ["queue", "confidence", "reason"]
    assert schema["additionalProperties"] is False
    assert "enum" not in ANSWER_SCHEMA["properties"]["queue"]  # the original is untouched
    assert TRIAGE_SCHEMA["properties"]["include_payload"]["default"] is False


# -- the contract --------------------------------------------------------------------------


def test_the_plugin_imports_only_the_public_contract() -> None:
    allowed = {"switchboard.plugin", "httpx", "jsonschema", "pydantic"}
    offenders = []
    for path in sorted(PLUGIN.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                if name in allowed or name.split(".")[0] in sys.stdlib_module_names:
                    continue
                offenders.append(f"{path.name}:{node.lineno}: {name}")
    assert offenders == []
