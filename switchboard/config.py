"""Configuration: a TOML file plus SWITCHBOARD_* environment variables, validated by schema."""

from __future__ import annotations

import copy
import difflib
import os
import tomllib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .configcheck import Origin, no_settings_message, schema_message, value_message
from .errors import ConfigError
from .resources import load_schema

DEFAULTS: dict[str, Any] = {
    "database_url": None,
    "base_url": "http://127.0.0.1:8080",
    "addr": "127.0.0.1:8080",
    # None: the per-user data directory (default_data_dir), wherever a command runs
    "data_dir": None,
    "secret_key": None,
    "disabled_plugins": [],
    # "auto": workers from the usable CPUs, pool sizes from the workers (server_sizes)
    "server": {
        "workers": "auto",
        "pool_min_size": "auto",
        "pool_max_size": "auto",
        "access_log": False,
        "database_timeout_ms": 2000,
        "header_timeout_ms": 10000,
        "max_connections": 2048,
        "max_connections_per_client": 512,
        "body_timeout_ms": 30000,
        "shutdown_grace_s": 15,
    },
    "ingest": {
        "max_body_bytes": 5 * 1024 * 1024,
        "rotation_overlap_hours": 24,
        "batch_max": 256,
        "writes_in_flight": 1,
    },
    "routing": {
        "stages": ["rules", "llm"],
        "stage_timeout_ms": 5000,
        "require_diff": False,
        "min_diff_events": 100,
        "diff_ttl_seconds": 3600,
    },
    "todos": {
        "lease_ttl_seconds": 300,
        "max_attempts": 5,
        "backoff_base_seconds": 5.0,
        "backoff_max_seconds": 3600.0,
        "result_max_bytes": 65536,
        "reply_payload_max_bytes": 262144,
    },
    # events_days None: events are kept forever (a webhook's routing config may set its own)
    "retention": {"events_days": None, "interval_s": 600.0, "batch_size": 1000},
    "metrics": {"enabled": True, "addr": "", "per_webhook": False, "max_queues": 50},
    "log": {"format": "auto", "level": None, "deliveries": "each"},
    "plugins": {},
}

#: How many worker processes ``serve`` started, for each worker's pool sizes (set by
#: ``serve``, read by :func:`server_sizes`; a flag may differ from the config).
WORKERS_ENV = "SWITCHBOARD_SERVE_WORKERS"

#: The connections all workers' pools may open together when the sizes are "auto".
POOL_BUDGET = 40

#: Environment variables for the essentials; they override the file.
ENV_KEYS = {
    "SWITCHBOARD_DATABASE_URL": "database_url",
    "SWITCHBOARD_BASE_URL": "base_url",
    "SWITCHBOARD_ADDR": "addr",
    "SWITCHBOARD_DATA_DIR": "data_dir",
    "SWITCHBOARD_SECRET_KEY": "secret_key",
}


def default_data_dir() -> Path:
    """The per-user data directory (``~/.local/share/switchboard`` on Linux, per
    ``platformdirs``): the same whichever directory a command or ``switchboard mcp`` starts in."""
    from platformdirs import user_data_dir

    return Path(user_data_dir("switchboard", appauthor=False))


@dataclass
class Config:
    """The validated configuration (``raw`` keeps every section as data).

    ``data_dir_from`` and ``database_url_from`` say where ``data_dir`` and
    ``database_url`` came from (for messages): the environment variable, the config file,
    or (data_dir) the per-user default.
    """

    raw: dict[str, Any]
    path: Path | None = None
    plugin_schemas: dict[str, dict[str, Any]] = field(default_factory=dict)
    data_dir_from: str = "the per-user default"
    database_url_from: str = "database_url"
    #: ``routing.stages`` was written in the file (then every name must be a stage, and
    #: ``[]`` means "no stages" on purpose), not taken from the defaults
    stages_written: bool = False
    #: ``base_url`` was given (file or ``SWITCHBOARD_BASE_URL``), not the built-in default
    base_url_written: bool = False
    #: The SWITCHBOARD_* variable that set each top-level key (by key), for messages
    env_keys: dict[str, str] = field(default_factory=dict)

    @property
    def origin(self) -> Origin:
        """Where the values came from, so a mistake found after loading (a stage, a
        plugin's own check) names the file or the variable as the schema's do."""
        return Origin(self.path, self.env_keys)

    def section(self, name: str) -> dict[str, Any]:
        value: dict[str, Any] = self.raw.get(name) or {}
        return value

    def plugin(self, name: str) -> dict[str, Any]:
        """The ``[plugins.<name>]`` section, with its schema's top-level defaults filled in.

        A copy: what a plugin does with its settings never changes the config.
        """
        schema = self.plugin_schemas.get(name) or {}
        defaults = {
            key: copy.deepcopy(prop["default"])
            for key, prop in (schema.get("properties") or {}).items()
            if isinstance(prop, dict) and "default" in prop
        }
        return {**defaults, **copy.deepcopy(self.raw["plugins"].get(name) or {})}

    @property
    def database_url(self) -> str | None:
        value: str | None = self.raw["database_url"] or None
        return value

    @property
    def base_url(self) -> str:
        return str(self.raw["base_url"]).rstrip("/")

    @property
    def host(self) -> str:
        return str(self.raw["addr"]).rsplit(":", 1)[0]

    @property
    def port(self) -> int:
        return int(str(self.raw["addr"]).rsplit(":", 1)[1])

    @property
    def data_dir(self) -> Path:
        value = self.raw["data_dir"]
        if value is None:
            return default_data_dir()
        return Path(value).expanduser().resolve()

    @property
    def disabled_plugins(self) -> list[str]:
        return list(self.raw["disabled_plugins"])

    @property
    def routing_stages(self) -> list[str]:
        return list(self.section("routing")["stages"])

    def validate_plugins(
        self,
        schemas: Mapping[str, dict[str, Any]],
        installed: Collection[str] | None = None,
        disabled_schemas: Mapping[str, dict[str, Any] | None] | None = None,
    ) -> None:
        """Check each ``[plugins.<name>]`` section against the plugin's schema, and (given
        the ``installed`` plugin names) that it names an installed plugin; a plugin with
        no schema takes no settings.

        ``disabled_schemas``: the schemas of the disabled plugins (``{}``: none declared),
        so their sections are checked too; a name missing there (its schema could not be
        read) is not checked.
        """
        disabled_schemas = disabled_schemas or {}
        origin = self.origin
        for name, section in self.raw["plugins"].items():
            if installed is not None and name not in installed:
                raise ConfigError(
                    f"{origin.where(('plugins', name))}: no installed plugin is called {name!r}"
                    f"{did_you_mean(name, installed)}; installed: {', '.join(sorted(installed))}"
                )
            disabled = name in set(self.disabled_plugins)
            if disabled and name not in disabled_schemas:
                continue
            schema = (disabled_schemas if disabled else schemas).get(name)
            if schema:
                _validate(section, schema, origin, prefix=("plugins", name))
            elif section and installed is not None:
                raise ConfigError(no_settings_message(name, section, origin))
        self.plugin_schemas = dict(schemas)


def did_you_mean(name: str, known: Collection[str]) -> str:
    """`` (did you mean 'rules'?)`` for the closest of ``known``, or nothing."""
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    # A deep copy: a config's sections must never be DEFAULTS' own dicts (a change to one
    # runtime's config would become every later config's default).
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _validate(
    doc: Any, schema: dict[str, Any], origin: Origin, prefix: tuple[str, ...] = ()
) -> None:
    problem = schema_message(doc, schema, origin, prefix)
    if problem is not None:
        raise ConfigError(problem)


def _read(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The TOML document at ``path``; what is wrong with it as one line (ConfigError)."""
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {path}: is a directory, not a file") from None
    except PermissionError:
        raise ConfigError(f"config file {path}: not readable (permission denied)") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"config file {path}: is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at"
            f" offset {exc.start}); TOML files are UTF-8"
        ) from None
    except OSError as exc:
        raise ConfigError(f"config file {path}: cannot be read ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    except RecursionError:  # tomllib parses nested arrays and tables by recursion
        raise ConfigError(
            f"config file {path}: nests too deeply (arrays or tables inside each other)"
        ) from None


def load_config(
    path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None
) -> Config:
    """Load ``path`` (or ``SWITCHBOARD_CONFIG``), apply the environment, and validate."""
    env = os.environ if env is None else env
    path = path or env.get("SWITCHBOARD_CONFIG") or None
    file_doc: dict[str, Any] = _read(path) if path is not None else {}
    _validate(file_doc, load_schema("config"), Origin(path))
    data_dir_from = "the per-user default"
    if isinstance(file_doc.get("data_dir"), str) and path is not None:
        # Relative to the file, not to wherever a command happens to run.
        file_doc["data_dir"] = str(
            Path(path).expanduser().resolve().parent / Path(file_doc["data_dir"]).expanduser()
        )
        data_dir_from = f"data_dir in {path}"
    from_env = {key: var for var, key in ENV_KEYS.items() if env.get(var)}
    for key, var in from_env.items():
        file_doc[key] = env[var]
    if env.get("SWITCHBOARD_DATA_DIR"):
        data_dir_from = "SWITCHBOARD_DATA_DIR"
    raw = _merge(DEFAULTS, file_doc)
    origin = Origin(path, from_env)
    _validate(raw, load_schema("config"), origin)
    problem = value_message(raw, origin, file_doc)
    if problem is not None:
        raise ConfigError(problem)
    return Config(
        raw=raw,
        path=Path(path) if path else None,
        data_dir_from=data_dir_from,
        database_url_from=from_env.get("database_url")
        or (f"database_url in {path}" if path else "database_url"),
        stages_written="stages" in (file_doc.get("routing") or {}),
        base_url_written="base_url" in file_doc,
        env_keys=from_env,
    )


def base_url_port(base_url: str) -> int:
    """The port a client reaches ``base_url`` on (the scheme's default when none is written)."""
    parts = urlsplit(base_url)
    return parts.port or (443 if parts.scheme == "https" else 80)


def base_url_mismatch(config: Config, listen_port: int) -> str | None:
    """What is wrong when ``base_url``'s port is not ``listen_port``, else None.

    The URLs handed out (ingest, MCP) are built from ``base_url``: pointing at another port
    they reach nothing, unless a proxy forwards that port here.
    """
    port = base_url_port(config.base_url)
    if port == listen_port:
        return None
    given = "base_url" if config.base_url_written else "the default base_url"
    return (
        f"{given} {config.base_url} is on port {port}, but the server listens on port"
        f" {listen_port}: the ingest and MCP URLs handed out point there (set base_url or"
        " SWITCHBOARD_BASE_URL, unless a proxy forwards that port here)"
    )


def no_database_message(config: Config) -> str:
    """What a command that may not create the embedded database says when there is none."""
    return (
        f"no Switchboard database in {config.data_dir} (the data dir, from "
        f"{config.data_dir_from}; it would use the embedded PostgreSQL in "
        f"{config.data_dir / 'pg'}). `switchboard serve` or `switchboard migrate` creates "
        "it there; to use another, give --config FILE (with data_dir or database_url) or set "
        "SWITCHBOARD_DATA_DIR or SWITCHBOARD_DATABASE_URL, as `serve` was given them"
    )


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask), else the machine's; at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity on this platform
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class ServerSizes:
    """Worker processes and each worker's pool, resolved from ``[server]`` ("auto" or set)."""

    workers: int
    pool_min: int
    pool_max: int
    auto: tuple[str, ...]  # which of workers, pool_min_size, pool_max_size were "auto"


def server_sizes(
    config: Config, workers: int | None = None, env: Mapping[str, str] | None = None
) -> ServerSizes:
    """The worker count (``workers``, else what ``serve`` exported, else ``[server] workers``)
    and the pool sizes that follow from it.

    ``workers = "auto"``: :func:`usable_cpus`. ``pool_max_size = "auto"``:
    ``POOL_BUDGET // workers`` clamped to 3..20 per worker (the delivery writer and the
    token resolver each hold one connection at a time, plus one for everything else), so
    the workers together open at most 40 up to 13 workers and 3 each beyond;
    ``pool_min_size = "auto"``: 2 (the writer's and the resolver's), never above the max.
    A size that is set wins; an "auto" one yields to it (max at least min).
    """
    env = os.environ if env is None else env
    server = config.section("server")
    auto = tuple(
        k
        for k in ("workers", "pool_min_size", "pool_max_size")
        if server.get(k, "auto") == "auto" and not (k == "workers" and workers)
    )
    if workers is None and env.get(WORKERS_ENV, "").isdigit():
        workers = int(env[WORKERS_ENV])
    if workers is None:
        workers = usable_cpus() if "workers" in auto else int(server["workers"])
    workers = max(1, workers)
    fixed_min = None if "pool_min_size" in auto else int(server["pool_min_size"])
    fixed_max = None if "pool_max_size" in auto else int(server["pool_max_size"])
    pool_max = (
        fixed_max
        if fixed_max is not None
        else max(fixed_min or 0, min(20, max(3, POOL_BUDGET // workers)))
    )
    pool_min = fixed_min if fixed_min is not None else min(2, pool_max)
    return ServerSizes(workers, pool_min, pool_max, auto)


def database_timeout_s(config: Config) -> float:
    """How long any one database wait may take, in seconds (``[server] database_timeout_ms``)."""
    return int(config.section("server").get("database_timeout_ms", 2000)) / 1000
