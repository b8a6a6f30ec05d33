"""The runtime: config, plugin manager, registries, store and secrets of one process.

It implements the contract's :class:`switchboard.contract.Runtime` protocol (what a plugin
may use of it) and holds more: the plugin manager, the secrets and the embedded database.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import TYPE_CHECKING, Any

import pluggy
import psycopg

from . import contract
from .config import Config, database_timeout_s, did_you_mean, no_database_message, server_sizes
from .configcheck import Origin
from .contract import Registries, RoutingStage
from .errors import ConfigError, PluginError
from .plugins import apply_config, build_registries, call_each, make_plugin_manager
from .secrets_box import SecretBox, load_or_create_secret_key
from .store import Database, Store
from .store import migrate as migrations
from .store.dsn import check_dsn, unreachable
from .store.embedded import EmbeddedPostgres, embedded_exists
from .store.refusals import DEFAULT_REFUSALS_KEPT
from .store.rings import Rings

log = logging.getLogger("switchboard")

#: How long a plugin's start-up hook may take (a sandbox started, a model warmed) and its
#: shut-down hook: a hung one would hold the start, or the stop, for ever.
PLUGIN_START_S = 60.0
PLUGIN_STOP_S = 10.0


def _unknown_stage(name: str, known: set[str], disabled: list[str], origin: Origin) -> str:
    why = " (disabled_plugins disables the plugin of that name)" if name in disabled else ""
    return (
        f"{origin.where(('routing', 'stages'))}: {name!r} is not an installed stage{why}"
        f"{did_you_mean(name, known) if not why else ''}; the stages are: "
        f"{', '.join(sorted(known)) or 'none'}"
    )


class Runtime:
    """Everything a request handler, CLI command or MCP tool needs, built once."""

    def __init__(self, config: Config, pm: pluggy.PluginManager | None = None) -> None:
        self.config = config
        self.pm = pm or make_plugin_manager(config.disabled_plugins, config.origin)
        apply_config(self.pm, config)
        self.registries: Registries = build_registries(self.pm, config)
        self._check_stages()
        self._store: Store | None = None
        self._embedded: EmbeddedPostgres | None = None
        self._secrets: SecretBox | None = None
        self.dsn: str | None = config.database_url
        self._dsn_checked = False
        #: Plugins keep per-process state here under their own name.
        self.state: dict[str, Any] = {}

    def _check_stages(self) -> None:
        # A typo'd stage would silently route every delivery to the default, so a name
        # written in `routing.stages` must be a stage; the default list keeps only what is
        # installed and enabled, and must keep one (`stages = []` says "none" on purpose).
        known = set(self.registries.stages.names())
        origin = self.config.origin
        names = self.config.routing_stages
        if self.config.stages_written:
            for name in names:
                if name not in known:
                    raise ConfigError(
                        _unknown_stage(name, known, self.config.disabled_plugins, origin)
                    )
        else:
            names = [n for n in names if n in known]
            if not names:
                # The defaults, not the file's, yet the file is where to name the stages.
                raise ConfigError(
                    f"{origin.where(('routing', 'stages'))}: none of the default stages ("
                    f"{', '.join(self.config.routing_stages)}) is installed and enabled; "
                    "name the stages to run, or write routing.stages = [] for every "
                    "delivery to take the default action"
                )
        stages = (self.registries.stages.get(n) for n in names)
        self.stages: list[RoutingStage] = [s for s in stages if s is not None]

    # -- storage ---------------------------------------------------------------------

    def ensure_database(self, *, quiet: bool = False, create: bool = True) -> str:
        """The DSN to use: the configured one, else the embedded server (started now).

        ``create=False`` refuses to initialize an embedded database where there is none
        yet (a ``ConfigError`` saying where it looked and how to choose another), so a
        command run with the wrong config or environment never answers from a new, empty
        one as if it were the real one.
        """
        if self.dsn is None:
            if not create and not embedded_exists(self.config.data_dir, self.config.data_dir_from):
                raise ConfigError(no_database_message(self.config))
            self._embedded = EmbeddedPostgres(
                self.config.data_dir, quiet=quiet, source=self.config.data_dir_from
            )
            self.dsn = self._embedded.start()
        elif self._embedded is None and not self._dsn_checked:
            check_dsn(self.dsn, self.database_url_from())
            self._dsn_checked = True
        return self.dsn

    def database_url_from(self) -> str:
        """Where the database the runtime uses was named (for messages)."""
        if self.config.database_url is None:
            return f"the embedded PostgreSQL in {self.config.data_dir / 'pg'}"
        return self.config.database_url_from

    @property
    def embedded(self) -> EmbeddedPostgres | None:
        """The embedded server this runtime started, if it uses one."""
        return self._embedded

    async def migrate(self, *, create: bool = True) -> list[str]:
        dsn = self.ensure_database(create=create)
        timeout_s = database_timeout_s(self.config)
        try:
            return await migrations.apply(
                dsn, migrations.collect(self.registries.migrations.directories), timeout=timeout_s
            )
        except psycopg.OperationalError as exc:
            raise unreachable(dsn, self.database_url_from(), exc) from exc

    async def open_store(self, *, migrate: bool = True, create: bool = True) -> Store:
        """Open the pool (migrating first unless ``migrate=False``); ``create``: as
        :meth:`ensure_database`."""
        if self._store is None:
            if migrate:
                await self.migrate(create=create)
            else:
                self.ensure_database(create=create)
            sizes = server_sizes(self.config)
            db = Database(
                self.ensure_database(),
                min_size=sizes.pool_min,
                max_size=sizes.pool_max,
                acquire_timeout=database_timeout_s(self.config),
            )
            await db.open()
            ingest = self.config.section("ingest")
            self._store = Store(
                db,
                batch_max=int(ingest.get("batch_max", 256)),
                writes_in_flight=int(ingest.get("writes_in_flight", 1)),
                refusals_kept=int(ingest.get("refusals_kept", DEFAULT_REFUSALS_KEPT)),
                rings=Rings(self.registries.sinks.notifies()),
            )
        return self._store

    @property
    def store(self) -> Store:
        if self._store is None:
            raise RuntimeError("the store is not open")
        return self._store

    @property
    def secrets(self) -> SecretBox:
        if self._secrets is None:
            key = load_or_create_secret_key(
                self.config.raw["secret_key"], self.config.data_dir, self.config.data_dir_from
            )
            self._secrets = SecretBox(key)
        return self._secrets

    # -- lifecycle -------------------------------------------------------------------

    async def startup(self) -> None:
        for plugin, result in call_each(self.pm, "switchboard_startup", runtime=self, app=self):
            if inspect.isawaitable(result):
                try:
                    await asyncio.wait_for(result, PLUGIN_START_S)
                except TimeoutError:
                    raise PluginError(
                        f"plugin {plugin!r} did not start within {PLUGIN_START_S:g} s"
                    ) from None
                except Exception as exc:
                    raise PluginError(f"plugin {plugin!r} failed to start: {exc}") from exc

    async def shutdown(self) -> None:
        for plugin, result in call_each(self.pm, "switchboard_shutdown", runtime=self, app=self):
            try:
                if inspect.isawaitable(result):
                    await asyncio.wait_for(result, PLUGIN_STOP_S)
            except TimeoutError:
                log.warning(
                    "plugin %r did not shut down within %g s: left as it was", plugin, PLUGIN_STOP_S
                )
            except Exception:
                log.exception("plugin %r failed to shut down", plugin)
        if self._store is not None:
            try:  # refusals still queued are written before the pool goes
                await asyncio.wait_for(self._store.refusals.drain(), 5.0)
            except (TimeoutError, RuntimeError):
                log.warning("refused deliveries still queued were not recorded")
            await self._store.db.close()
            self._store = None

    def stop_embedded(self) -> None:
        if self._embedded is not None:
            self._embedded.stop()
            self._embedded = None


if TYPE_CHECKING:
    # The host's runtime has the shape the contract promises plugins (checked by mypy).
    _implements: type[contract.Runtime] = Runtime
