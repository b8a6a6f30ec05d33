"""The registries that registration hooks fill once at start-up, and what they hold."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Generic, Iterator, TypeVar

from .envelope import Projection, SubjectExtractor
from .errors import PluginError
from .routing import LLMProvider
from .sources import Source

T = TypeVar("T")


class NamedRegistry(Generic[T]):
    """Objects keyed by a unique ``name``, in registration order."""

    kind = "object"

    def __init__(self) -> None:
        self._items: dict[str, T] = {}
        self._owner: dict[str, str] = {}
        #: Set by the plugin manager around each plugin's registration call.
        self.current_plugin = "?"

    def add(self, item: T) -> T:
        name = getattr(item, "name", None)
        if not isinstance(name, str) or not name:
            raise PluginError(f"plugin {self.current_plugin!r}: {self.kind} has no name")
        self._put(name, item)
        return item

    def _put(self, name: str, item: T) -> None:
        if name in self._items:
            raise PluginError(
                f"{self.kind} {name!r} registered twice: by {self._owner[name]!r} "
                f"and by {self.current_plugin!r}"
            )
        self._items[name] = item
        self._owner[name] = self.current_plugin

    def get(self, name: str) -> T | None:
        return self._items.get(name)

    def owner(self, name: str) -> str:
        return self._owner.get(name, "?")

    def names(self) -> list[str]:
        return list(self._items)

    def __iter__(self) -> Iterator[T]:
        return iter(list(self._items.values()))

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __len__(self) -> int:
        return len(self._items)


class SourceRegistry(NamedRegistry[Source]):
    kind = "source"


class ProjectionRegistry(NamedRegistry[Projection]):
    """Projections keyed by ``name:source``: one builder per envelope key and source."""

    kind = "projection"

    def __init__(self) -> None:
        super().__init__()
        self._names: dict[str, None] = {}
        self._by_source: dict[str, tuple[Projection, ...]] = {}  # asked on every delivery

    def add(self, item: Projection) -> Projection:
        for source in item.sources:
            self._put(f"{item.name}:{source}", item)
        self._names[item.name] = None
        self._by_source.clear()
        return item

    def envelope_keys(self) -> list[str]:
        """Every top-level key some projection fills (always present in envelopes)."""
        return list(self._names)

    def for_source(self, source: str) -> list[Projection]:
        found = self._by_source.get(source)
        if found is None:
            found = tuple(p for k, p in self._items.items() if k.endswith(":" + source))
            self._by_source[source] = found
        return list(found)


class SubjectRegistry(NamedRegistry[SubjectExtractor]):
    kind = "subject extractor"


class LLMProviderRegistry(NamedRegistry[LLMProvider]):
    kind = "LLM provider"


@dataclass
class RulePack:
    name: str
    config: dict[str, Any]
    description: str = ""


class RulePackRegistry(NamedRegistry[RulePack]):
    kind = "rule pack"

    def add_pack(self, name: str, config: dict[str, Any], description: str = "") -> RulePack:
        return self.add(RulePack(name, config, description))


@dataclass(frozen=True)
class ToolContext:
    """What an MCP tool function receives first: the runtime and the calling endpoint.

    ``endpoint`` is the live endpoints row the bearer token authenticated (its ``id``,
    ``owner_human``, ``scope_queues``, ``verbs``, webhook ceiling...), re-checked on every
    request; ``owner`` is the identity a claimed todo records; ``given`` names the
    arguments the caller sent.
    """

    runtime: Any
    endpoint: dict[str, Any]
    session_id: str | None = None
    #: The argument names the caller actually sent (None: not known). A tool whose
    #: omitted argument means something other than its default (``set_webhook_rules``
    #: keeps stored params when ``params`` is left out, clears them on null) reads it.
    given: frozenset[str] | None = None
    #: ``await progress(done, total, message)`` reports how far a long tool call is; a
    #: no-op unless the client's request asked for progress (its ``progressToken``).
    progress: Callable[[float, float | None, str | None], Awaitable[None]] | None = None

    @property
    def owner(self) -> str:
        return str(self.endpoint["id"])

    async def report_progress(
        self, done: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Tell the client how far this call is (nothing when it did not ask)."""
        if self.progress is not None:
            await self.progress(done, total, message)


@dataclass
class MCPTool:
    name: str
    fn: Callable[..., Awaitable[Any]]
    description: str = ""
    verb: str = ""
    #: The verb changes a webhook (creates, rotates, deletes it, or writes its rules or
    #: routes): an endpoint that may own no webhooks is not given it unless vended with it.
    manages_webhooks: bool = False

    def __post_init__(self) -> None:
        self.verb = self.verb or self.name


class MCPToolRegistry(NamedRegistry[MCPTool]):
    kind = "MCP tool"

    def add_tool(
        self,
        name: str,
        fn: Callable[..., Awaitable[Any]],
        description: str = "",
        verb: str = "",
        *,
        manages_webhooks: bool = False,
    ) -> MCPTool:
        return self.add(
            MCPTool(name, fn, description or (fn.__doc__ or "").strip(), verb, manages_webhooks)
        )


@dataclass
class Command:
    """A ``switchboard`` sub-command: ``configure(parser)`` or ``configure(parser, runtime)``
    adds its arguments; ``run(args, runtime)`` runs it."""

    name: str
    configure: Callable[..., None]
    #: async for most commands; a plain function for those that run their own loop.
    run: Callable[..., Any]
    help: str = ""
    needs_store: bool = True
    #: Whether it may create the embedded database when there is none yet: a bool, or
    #: ``f(args)`` deciding per invocation (``human add`` may, ``human list`` may not).
    #: Only a command that is useful on an empty database should: any other run in the
    #: wrong place would silently start a new, empty one.
    creates_database: bool | Callable[[Any], bool] = False

    def may_create_database(self, args: Any) -> bool:
        create = self.creates_database
        return bool(create(args) if callable(create) else create)


class CommandRegistry(NamedRegistry[Command]):
    kind = "command"

    def add_command(
        self,
        name: str,
        configure: Callable[..., None],
        run: Callable[..., Any],
        help: str = "",
        needs_store: bool = True,
        creates_database: bool | Callable[[Any], bool] = False,
    ) -> Command:
        return self.add(Command(name, configure, run, help, needs_store, creates_database))


@dataclass
class MigrationRegistry:
    directories: list[tuple[str, Path]] = field(default_factory=list)
    current_plugin: str = "?"

    def add_directory(self, plugin: str, path: Path | str) -> None:
        self.directories.append((plugin, Path(path)))
