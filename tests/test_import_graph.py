"""The import graph has no circle, ``TYPE_CHECKING`` included, and the contract is a leaf.

Every module of ``switchboard`` and of the first-party plugins is read with :mod:`ast` (never
imported), and every import it names is an edge: at module level, under ``if TYPE_CHECKING:``
or inside a function. Relative imports are resolved, and ``from pkg import name`` is an edge to
``pkg.name`` when that is a module, else to ``pkg``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: The contract: what a plugin implements or receives. It imports nothing else of the host.
CONTRACT = "switchboard.contract"


def _package_roots() -> list[Path]:
    """The host package and every first-party plugin package (``plugins/*/`` and
    ``plugins/<dist>/<package>/``)."""
    roots = [ROOT / "switchboard"]
    for path in sorted((ROOT / "plugins").glob("*/__init__.py")):
        roots.append(path.parent)
    for path in sorted((ROOT / "plugins").glob("*/*/__init__.py")):
        if not (path.parent.parent / "__init__.py").exists():
            roots.append(path.parent)
    return roots


def _modules() -> dict[str, Path]:
    """Every module by dotted name (a package by its own name, for its ``__init__``)."""
    out: dict[str, Path] = {}
    for root in _package_roots():
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root.parent).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _resolve(module: str, level: int, target: str | None) -> str:
    """The absolute name ``from <level dots><target>`` means inside ``module``."""
    if level == 0:
        return target or ""
    base = module.split(".")
    if not _is_package(module):
        base.pop()
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, *([target] if target else [])])


def _known(name: str) -> str | None:
    """``name`` or its nearest enclosing module that is ours (None: not ours)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(module: str) -> set[str]:
    """Every module of ours that ``module`` imports, anywhere in its source."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"), str(MODULES[module]))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found = _known(alias.name)
                if found:
                    out.add(found)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, node.level, node.module)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found = sub if sub in MODULES else _known(base)
                if found:
                    out.add(found)
    out.discard(module)
    return out


GRAPH = {name: imports_of(name) for name in MODULES}


def _components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def _a_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One concrete circle through ``component``'s first module: the shortest way back."""
    members = set(component)
    start = component[0]
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt_frontier = []
        for node in frontier:
            for nxt in sorted(graph[node] & members):
                if nxt == start:
                    return [*paths[node], start]
                if nxt not in paths:
                    paths[nxt] = [*paths[node], nxt]
                    nxt_frontier.append(nxt)
        frontier = nxt_frontier
    raise AssertionError(f"no circle through {start}")  # pragma: no cover


def test_the_walk_sees_the_packages_and_their_imports() -> None:
    assert {"switchboard", "switchboard.plugin", "switchboard.store", CONTRACT} <= set(MODULES)
    assert "switchboard_rules" in MODULES
    # Relative, absolute, ``from pkg import submodule``, TYPE_CHECKING and function-level
    # imports all count.
    assert "switchboard.store.db" in GRAPH["switchboard.store"]
    assert "switchboard.routing.model" in GRAPH["switchboard.routing.config"]
    assert "switchboard.hookspecs" in GRAPH["switchboard.plugins"]
    assert "switchboard.store.migrate" in GRAPH["switchboard.runtime"]
    assert "switchboard.contract" in GRAPH["switchboard.hookspecs"]  # under TYPE_CHECKING
    assert "switchboard" in GRAPH["switchboard.plugins"]  # inside list_plugins
    assert "switchboard.plugin" in GRAPH["switchboard_rules"]


def test_no_import_circle() -> None:
    circles = [
        f"{' -> '.join(_a_cycle(GRAPH, c))}  (a circle of {len(c)}: {', '.join(c)})"
        for c in _components(GRAPH)
    ]
    assert not circles, "import circles (TYPE_CHECKING and function-level imports count):\n" + (
        "\n".join(circles)
    )


def test_the_cycle_finder_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    [component] = _components(graph)
    assert component == ["a", "b", "c"]
    assert _a_cycle(graph, component) == ["a", "b", "c", "a"]


CONTRACT_MODULES = sorted(m for m in MODULES if m == CONTRACT or m.startswith(CONTRACT + "."))


@pytest.mark.parametrize("module", CONTRACT_MODULES)
def test_the_contract_imports_nothing_of_the_host(module: str) -> None:
    outside = sorted(m for m in GRAPH[module] if m not in CONTRACT_MODULES)
    assert not outside, f"{module} imports {outside}: the contract must stay a leaf"


def test_the_hookspecs_name_only_the_contract() -> None:
    # The hook module is what the host's plugin manager loads; it must not reach back into
    # the implementations that the manager itself builds.
    outside = sorted(m for m in GRAPH["switchboard.hookspecs"] if m not in CONTRACT_MODULES)
    assert not outside, f"switchboard.hookspecs imports {outside}"


def test_the_public_contract_module_reexports_the_contract() -> None:
    from switchboard import contract, plugin

    for name in contract.__all__:
        assert getattr(plugin, name) is getattr(contract, name), name
        assert name in plugin.__all__, name


#: A module past this many lines holds more than one job (issue 39: "rooms of one job").
MODULE_MAX_LINES = 500


def test_no_module_is_over_the_line_limit() -> None:
    """Every module of the host, the plugins and the benches, tests aside."""
    paths = [
        *(ROOT / "switchboard").rglob("*.py"),
        *(ROOT / "plugins").rglob("*.py"),
        *(ROOT / "bench").rglob("*.py"),
    ]
    assert len(paths) > 100
    long = {
        str(path.relative_to(ROOT)): n
        for path in paths
        if "build" not in path.parts
        and (n := len(path.read_text(encoding="utf-8").splitlines())) > MODULE_MAX_LINES
    }
    assert long == {}, f"modules over {MODULE_MAX_LINES} lines: {long}"


# --------------------------------------------------------------------------------------
# First-party plugins import nothing of the host but switchboard.plugin
# --------------------------------------------------------------------------------------

#: The public contract: the one host module a plugin imports.
PUBLIC = "switchboard.plugin"
#: The only first-party plugin modules that import more of the host, and why: each is a
#: surface over the service layer (switchboard/service/*), the host's own way in for
#: people and agents, shipped as a plugin so it can be disabled. Everything that routes,
#: verifies, projects, sinks or answers as a model goes through ``switchboard.plugin``
#: alone, as a third party's would. A key is a package (all its modules) or one module.
HOST_SURFACES: dict[str, str] = {
    "switchboard_mcp": "the MCP server: authenticates endpoints and calls the service verbs "
    "as tools, with the host's errors, config and host checks",
    "switchboard_console": "the web console: signs people in (the host's secret box and "
    "host checks) and shows the service layer's webhooks and deliveries",
    "switchboard_rules.commands": "the `switchboard rules` CLI commands: the rules service "
    "verbs over the runtime",
    "switchboard_rules.history_cli": "the `switchboard rules diff|explain|lint` commands: the "
    "history service verbs rendered with the CLI's tables",
    "switchboard_rules.tools": "the rules MCP tools: the rules service verbs",
    "switchboard_rules.tools_policy": "the policy MCP tools: the policy service verbs",
    "switchboard_rules.tools_history": "the MCP tools over stored deliveries: the history "
    "and re-route service verbs",
}

PLUGIN_MODULES = sorted(m for m in MODULES if m.split(".")[0].startswith("switchboard_"))


def _host_imports(module: str) -> list[str]:
    """What ``module`` imports of the host other than the public contract."""
    return sorted(
        m
        for m in GRAPH[module]
        if (m == "switchboard" or m.startswith("switchboard.")) and m != PUBLIC
    )


def _surface(module: str) -> str | None:
    return next(
        (key for key in HOST_SURFACES if module == key or module.startswith(key + ".")), None
    )


def test_the_walk_sees_every_first_party_plugin() -> None:
    packages = {m.split(".")[0] for m in PLUGIN_MODULES}
    on_disk = {p.parent.name for p in (ROOT / "plugins").glob("*/__init__.py")} | {
        p.parent.name for p in (ROOT / "plugins").glob("switchboard-*/switchboard_*/__init__.py")
    }
    assert packages == on_disk
    # the plain packages and the ones inside a distribution directory alike
    assert {"switchboard_rules", "switchboard_llm", "switchboard_doorbell"} <= packages
    assert {"switchboard_stripe", "switchboard_standardwebhooks"} <= packages
    # ``from switchboard import x`` is an import of the host like any other
    assert "switchboard" in _host_imports("switchboard_mcp.server")


@pytest.mark.parametrize("module", PLUGIN_MODULES)
def test_a_first_party_plugin_imports_only_the_public_contract(module: str) -> None:
    outside = _host_imports(module)
    if _surface(module) is None:
        assert not outside, (
            f"{module} imports {outside}: a plugin imports nothing of the host but "
            f"{PUBLIC} (a surface over the service layer is listed in HOST_SURFACES)"
        )


@pytest.mark.parametrize("key", sorted(HOST_SURFACES))
def test_each_listed_surface_exists_and_needs_its_exception(key: str) -> None:
    covered = [m for m in PLUGIN_MODULES if _surface(m) == key]
    assert covered, f"{key} is listed in HOST_SURFACES but is no module"
    assert any(_host_imports(m) for m in covered), f"{key} no longer imports the host: unlist it"
