"""Shared fixtures: one PostgreSQL per session, a fresh database per test
(or, for tests that build their own tenant, one database and server per module)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sbpg import EXPECT_MAJOR, drop_database, server_version, session_server
from sbtest import CLI, Server, free_port, make_env

from switchboard.config import load_config, usable_cpus
from switchboard.runtime import Runtime
from switchboard.sources import Delivery, Headers
from switchboard.store import migrate

_counter = itertools.count()


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: Any) -> None:
    """Every ``async def`` test runs on anyio's asyncio backend, no marker needed.

    Marked while collecting (before parametrization), so ``parametrize`` still applies.
    """
    if name.startswith("test") and asyncio.iscoroutinefunction(obj):
        pytest.mark.anyio(obj)


@pytest.hookimpl(tryfirst=True)  # before -m deselects by it
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules with slow tests first (below); and ``own_server``: a test that never uses
    the session's PostgreSQL (it starts, freezes, kills or restarts one of its own, always
    the embedded one). Against an external server (tox's ``pg``) such a test proves
    nothing the embedded run does not: ``pg`` skips the slow ones (tox.ini)."""
    for item in items:
        if "pg_server" not in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.own_server)
    # The modules with slow tests first, so their minutes of deadlines start while the
    # short modules fill the other workers, not last in a tail of their own (pytest-xdist's
    # ``--dist loadfile`` hands modules out in this order).
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (tox): a worker per usable CPU, plus one for the fast subset (``-m "not
    slow"``).

    The fast subset waits about a third of its time (servers starting, subprocesses), so a
    worker per CPU left the cores idle: on 2 cores it took 355 s with 2 workers, 289 s with
    3 and 314 s with 4. The slow tests measure deadlines, latencies and budgets that a third
    worker on 2 cores disturbs (a 20 ms rule budget and a quiet client's p99 beside a flood
    each failed once), so a run with them keeps a worker per CPU.
    """
    fast = config.getoption("markexpr", "").replace(" ", "") == "notslow"
    return usable_cpus() + 1 if fast else usable_cpus()


#: What the session ran against, for the closing summary ("PostgreSQL 16.2 (embedded, …)").
_SERVER_LINE: list[str] = []


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The PostgreSQL the whole session shares: the embedded one (stopped at the end), or
    the external server ``SWITCHBOARD_TEST_DATABASE_URL`` names (tests/support/sbpg.py)."""
    server = session_server(tmp_path_factory.mktemp("pg"))
    try:
        num, version = server_version(server)
        _SERVER_LINE[:] = [f"PostgreSQL {version} ({server.where()})"]
        expected = os.environ.get(EXPECT_MAJOR)
        if expected and num // 10000 != int(expected):
            pytest.exit(
                f"{EXPECT_MAJOR}={expected}, but the session's server is {_SERVER_LINE[0]}",
                returncode=3,
            )
        yield server
    finally:
        server.cleanup()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for line in _SERVER_LINE:
        terminalreporter.write_line(f"database server: {line}")


@pytest.fixture(scope="session")
def template_db(pg_server: Any) -> Iterator[str]:
    """A database with every migration applied, cloned per test (named per session, so
    sessions sharing an external server keep apart)."""
    name = f"sb_template_{os.getpid()}"
    with psycopg.connect(pg_server.get_uri(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        from switchboard.plugins import build_registries, make_plugin_manager

        regs = build_registries(make_plugin_manager())
        asyncio.run(
            migrate.apply(pg_server.get_uri(name), migrate.collect(regs.migrations.directories))
        )
        yield name
    finally:
        drop_database(pg_server.get_uri(), name)


@contextlib.contextmanager
def _scratch_database(pg_server: Any, template: str | None) -> Iterator[str]:
    """Create a uniquely named database (from ``template`` when given), drop it after."""
    name = f"sb_t{os.getpid()}_{next(_counter)}"
    clause = f" TEMPLATE {template}" if template else ""
    with psycopg.connect(pg_server.get_uri(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}{clause}")
    try:
        yield pg_server.get_uri(name)
    finally:
        drop_database(pg_server.get_uri(), name)


@pytest.fixture
def dsn(pg_server: Any, template_db: str) -> Iterator[str]:
    """A fresh, migrated database for one test."""
    with _scratch_database(pg_server, template_db) as url:
        yield url


@pytest.fixture
def empty_dsn(pg_server: Any) -> Iterator[str]:
    """A fresh database with no migrations applied."""
    with _scratch_database(pg_server, None) as url:
        yield url


@pytest.fixture
def cli(dsn: str, tmp_path: Path) -> CLI:
    return CLI(make_env(dsn, tmp_path / "data"))


@contextlib.asynccontextmanager
async def _runtime(dsn: str, data_dir: Path, config: str | None = None) -> AsyncIterator[Runtime]:
    path = None
    if config is not None:
        data_dir.mkdir(parents=True, exist_ok=True)
        path = data_dir / "switchboard.toml"
        path.write_text(config)
    rt = Runtime(load_config(path, env=make_env(dsn, data_dir)))
    await rt.open_store(migrate=False)
    try:
        yield rt
    finally:
        await rt.shutdown()


@pytest.fixture
async def runtime(
    request: pytest.FixtureRequest, dsn: str, tmp_path: Path
) -> AsyncIterator[Runtime]:
    """An in-process runtime on a fresh database (service-layer tests), configured by the
    test module's ``CONFIG`` (TOML text) when it has one."""
    async with _runtime(dsn, tmp_path / "data", getattr(request.module, "CONFIG", None)) as rt:
        yield rt


@contextlib.contextmanager
def _servers(tmp_path: Path) -> Iterator[Any]:
    """``make(dsn, *serve_args, ...)`` starts a real server; every one is stopped on exit
    (``Server.stop`` also checks its log for secrets)."""
    servers: list[Server] = []

    def make(
        dsn: str | None,
        *extra: str,
        env_extra: dict[str, str] | None = None,
        data_dir: Path | None = None,
        config: Path | None = None,
    ) -> Server:
        env = make_env(dsn, data_dir or tmp_path / "data", **(env_extra or {}))
        port = free_port()
        env["SWITCHBOARD_BASE_URL"] = f"http://127.0.0.1:{port}"
        if config is not None:
            env["SWITCHBOARD_CONFIG"] = str(config)
        srv = Server(env, port, tmp_path / f"server-{port}.log")
        servers.append(srv)
        return srv.start(*extra)

    try:
        yield make
    finally:
        for srv in servers:
            srv.stop()


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[Any]:
    with _servers(tmp_path) as make:
        yield make


# -- Shared per module ---------------------------------------------------------------------
# A server costs a database clone and a start; a test that needs neither a fault on the
# database nor a config of its own shares its module's, building its own tenant there
# (names unique per test: ``World(cli, prefix=...)``) and reading back only its own rows.


@pytest.fixture(scope="module")
def module_dsn(pg_server: Any, template_db: str) -> Iterator[str]:
    """A migrated database one test module shares (dropped when the module ends)."""
    with _scratch_database(pg_server, template_db) as url:
        yield url


@pytest.fixture(scope="module")
def module_server_factory(
    module_dsn: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    """``server_factory`` for servers a whole module shares, usually on ``module_dsn``.

    They are stopped when the module ends (logs checked for secrets, as ``Server.stop``
    does), before ``module_dsn`` is dropped: this fixture depends on it for that order.
    """
    with _servers(tmp_path_factory.mktemp("module-server")) as make:
        yield make


@pytest.fixture(scope="module")
def module_server(module_server_factory: Any, module_dsn: str) -> Server:
    """One plain ``switchboard serve`` on ``module_dsn``, shared by the module's tests."""
    srv: Server = module_server_factory(module_dsn)
    return srv


@pytest.fixture
async def module_runtime(module_dsn: str, tmp_path: Path) -> AsyncIterator[Runtime]:
    """An in-process runtime for one test, on the module's shared database."""
    async with _runtime(module_dsn, tmp_path / "data") as rt:
        yield rt


FIXTURES = Path(__file__).resolve().parent / "fixtures"
#: The secret the recorded fixtures were signed with (tests/fixtures/README.md).
FIXTURE_SECRET = b"fixture-signing-secret-9f3c2a7e51d04b68"


@dataclass(frozen=True)
class Recorded:
    """A recorded delivery: its exact body bytes, its headers and the secret it was signed with."""

    body: bytes
    headers: dict[str, str]
    secret: bytes = FIXTURE_SECRET

    def delivery(self) -> Delivery:
        return Delivery(Headers(self.headers), self.body, self.headers.get("Content-Type"))


def _load(name: str) -> Recorded:
    body = (FIXTURES / f"{name}.json").read_bytes()
    headers = json.loads((FIXTURES / f"{name}.headers.json").read_text(encoding="utf-8"))
    return Recorded(body, headers)


@pytest.fixture
def recorded() -> Callable[[str], Recorded]:
    """Load a recorded delivery by fixture name (``github_issues_opened``)."""
    return _load
