"""LLM triage fixtures: a fake OpenAI-compatible server, a real ``switchboard serve``
configured with it, and a tenant per test (its own endpoint, webhook and model names)."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from fakeai import FakeAI
from sbllm import API_KEY, KEY_ENV, Tenant, llm_toml, new_tenant
from sbtest import Server

from switchboard.config import load_config
from switchboard.runtime import Runtime

_tenant = itertools.count()


@pytest.fixture(scope="module")
def fake_ai() -> Iterator[FakeAI]:
    fake = FakeAI().start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def llm_config(fake_ai: FakeAI, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("llm-config") / "sb.toml"
    path.write_text(llm_toml(fake_ai.base_url, max_timeout_ms=5000))
    return path


@pytest.fixture(scope="module")
def llm_server(module_server_factory: Any, module_dsn: str, llm_config: Path) -> Server:
    """The module's shared server, with the fake and static providers configured."""
    srv: Server = module_server_factory(module_dsn, config=llm_config, env_extra={KEY_ENV: API_KEY})
    return srv


@pytest.fixture
async def llm_runtime(
    llm_server: Server, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Runtime]:
    """An in-process runtime exactly as the module's server is configured (its config
    file, database and base URL)."""
    monkeypatch.setenv(KEY_ENV, API_KEY)
    rt = Runtime(load_config(env=llm_server.env))
    await rt.open_store(migrate=False)
    try:
        yield rt
    finally:
        await rt.shutdown()


@pytest.fixture
async def tenant(llm_server: Server, llm_runtime: Runtime) -> Tenant:
    """This test's own human, endpoint (webhook queues inbox, triage, review) and webhook."""
    return await new_tenant(llm_server, llm_runtime, next(_tenant), "llm")
