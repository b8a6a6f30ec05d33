"""The hook specifications are the contract a third party writes against.

Each spec documents every argument and names only what :mod:`switchboard.plugin` exports;
the fixture plugin (tests/plugins/hello, installed like any package) implements every one,
and what each of its registration hooks registered is found in the registries.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import re
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pluggy
import pytest
from sbtest import install_hello

from switchboard import hookspecs, plugin
from switchboard.config import load_config
from switchboard.plugins import REGISTRATION_HOOKS, build_registries, make_plugin_manager
from switchboard.runtime import Runtime

SPECS: dict[str, Callable[..., Any]] = {
    name: fn
    for name, fn in inspect.getmembers(hookspecs, inspect.isfunction)
    if hasattr(fn, "switchboard_spec")
}
#: Names an annotation may use besides the contract's own (builtins, typing).
_PLAIN = {"Any", "Awaitable", "None"} | set(dir(builtins))


def _doc(fn: Callable[..., Any]) -> str:
    return inspect.getdoc(fn) or ""


def _params(fn: Callable[..., Any]) -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(fn).parameters)


def test_the_specs_are_the_hooks_the_host_knows() -> None:
    assert len(SPECS) >= 14
    with_register = {n for n, fn in SPECS.items() if "register" in _params(fn)}
    assert with_register == set(REGISTRATION_HOOKS)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_hookspec_documents_each_parameter(name: str) -> None:
    fn = SPECS[name]
    doc = _doc(fn)
    assert name.startswith("switchboard_")
    assert len(doc.splitlines()) >= 3, f"{name} needs a real docstring"
    for param in _params(fn):
        assert f":param {param}:" in doc, f"{name}: {param!r} is not documented"
    documented = set(re.findall(r":param (\w+):", doc))
    assert documented <= set(_params(fn)), f"{name} documents arguments it does not take"
    if inspect.signature(fn).return_annotation not in ("None", None):
        assert ":return:" in doc, f"{name}: its result is not documented"
    assert not fn.switchboard_spec.get("firstresult"), f"{name}: no firstresult hooks"  # type: ignore[attr-defined]


def test_every_contract_name_in_the_docs_exists() -> None:
    docs = "\n".join([hookspecs.__doc__ or "", *(_doc(fn) for fn in SPECS.values())])
    named = set(re.findall(r"switchboard\.plugin\.([A-Za-z_]\w*)", docs))
    assert {"Source", "Projection", "Sink", "RoutingStage", "Runtime"} <= named
    missing = sorted(n for n in named if n not in plugin.__all__)
    assert not missing, f"the hookspecs name switchboard.plugin.{missing} which it lacks"


def _annotation_names(fn: Callable[..., Any]) -> set[str]:
    sig = inspect.signature(fn)
    texts = [str(p.annotation) for p in sig.parameters.values()]
    texts.append(str(sig.return_annotation))
    return {n for text in texts for n in re.findall(r"[A-Za-z_]\w*", text)} - _PLAIN


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_type_a_hookspec_names_is_in_the_contract(name: str) -> None:
    names = _annotation_names(SPECS[name])
    missing = sorted(n for n in names if n not in plugin.__all__)
    assert not missing, f"{name}: {missing} not importable from switchboard.plugin"


@pytest.mark.parametrize("name", sorted(REGISTRATION_HOOKS))
def test_each_registry_has_the_add_methods_its_hook_documents(name: str) -> None:
    fn = SPECS[name]
    registry = getattr(plugin.Registries(), REGISTRATION_HOOKS[name])
    assert _params(fn)["register"].annotation == type(registry).__name__
    assert type(registry).__name__ in plugin.__all__
    methods = set(re.findall(r"register\.(add\w*)\(", _doc(fn)))
    assert methods, f"{name} documents no register.add*() call"
    for method in methods:
        assert callable(getattr(registry, method, None)), f"{type(registry).__name__}.{method}"
    if "config" in _params(fn):
        assert "this plugin's section" in _doc(fn)


# -- the fixture plugin implements every hook -----------------------------------------------


@pytest.fixture(scope="module")
def hello_pm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[pluggy.PluginManager]:
    """A plugin manager that found the hello distribution through its entry point.

    The distribution is pip-installed from a copy into a directory of its own that is on
    ``sys.path`` for this module only (never into the shared venv).
    """
    root = tmp_path_factory.mktemp("hello")
    site = install_hello(root)
    sys.path.insert(0, str(site))
    importlib.invalidate_caches()
    try:
        yield make_plugin_manager()
    finally:
        sys.path.remove(str(site))
        for mod in [m for m in sys.modules if m.partition(".")[0] == "switchboard_hello"]:
            del sys.modules[mod]
        importlib.invalidate_caches()
        shutil.rmtree(root, ignore_errors=True)


def _call_hello(pm: pluggy.PluginManager, hook: str, **kwargs: Any) -> Any:
    [impl] = [i for i in getattr(pm.hook, hook).get_hookimpls() if i.plugin_name == "hello"]
    return impl.function(**{k: v for k, v in kwargs.items() if k in impl.argnames})


def test_hello_implements_every_hookspec(hello_pm: pluggy.PluginManager) -> None:
    hello = hello_pm.get_plugin("hello")
    assert hello is not None
    implemented = {caller.name for caller in hello_pm.get_hookcallers(hello) or ()}
    assert implemented == set(SPECS)


def test_hello_imports_from_switchboard_plugin_only(hello_pm: pluggy.PluginManager) -> None:
    package = Path(hello_pm.get_plugin("hello").__file__).parent
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                modules = [node.module or ""]
            elif isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            else:
                continue
            for module in modules:
                if module.partition(".")[0] == "switchboard":
                    assert module == "switchboard.plugin", f"{path.name} imports {module}"


def test_each_registration_of_hello_is_in_the_registries(
    hello_pm: pluggy.PluginManager, tmp_path: Path
) -> None:
    sink_path = tmp_path / "sink.jsonl"
    config_file = tmp_path / "sb.toml"
    config_file.write_text(
        f'[routing]\nstages = ["hello", "rules"]\n\n[plugins.hello]\nsink_path = "{sink_path}"\n'
    )
    rt = Runtime(load_config(config_file, env={}), pm=hello_pm)
    regs = rt.registries

    for hook, attr in REGISTRATION_HOOKS.items():
        registry = getattr(regs, attr)
        if isinstance(registry, plugin.MigrationRegistry):
            owners = {owner for owner, _ in registry.directories}
        else:
            owners = {registry.owner(name) for name in registry.names()}
        assert "hello" in owners, f"{hook}: nothing of hello's in registries.{attr}"

    source = regs.sources.get("acme")
    assert isinstance(source, plugin.Source) and source.trust_mode == plugin.TRUST_SIGNED
    assert isinstance(source, plugin.IdentifyingSource)
    assert plugin.producer_side(source) is source
    [projection] = regs.projections.for_source("acme")
    assert isinstance(projection, plugin.Projection)
    assert projection.name == "acme" and projection.title_key == "title"
    assert "acme" in regs.projections.envelope_keys()
    assert regs.subjects.get("acme").subject("acme", None, {"id": "T-1"}) == "acme:T-1"
    stage = regs.stages.get("hello")
    assert isinstance(stage, plugin.RoutingStage) and isinstance(stage, plugin.ValidatingStage)
    assert [s.name for s in rt.stages] == ["hello", "rules"]
    assert regs.rule_packs.get("acme-urgent").config["rules"][0]["id"] == "acme-urgent"
    assert regs.llm_providers.get("hello-echo") is not None
    # The sink and the tool were built from hello's own section (defaults filled in).
    sink = regs.sinks.get("hello-jsonl")
    assert isinstance(sink, plugin.Sink) and sink.path == sink_path
    tool = regs.mcp_tools.get("hello")
    assert isinstance(tool, plugin.MCPTool) and tool.verb == "hello"
    assert regs.commands.get("hello").needs_store is False
    assert (
        "hello",
        Path(hello_pm.get_plugin("hello").__file__).with_name("migrations"),
    ) in regs.migrations.directories


async def test_hello_tool_and_stage_work_from_the_contract(
    hello_pm: pluggy.PluginManager, tmp_path: Path
) -> None:
    rt = Runtime(load_config(env={"SWITCHBOARD_DATA_DIR": str(tmp_path)}), pm=hello_pm)
    tool = rt.registries.mcp_tools.get("hello")
    ctx = plugin.ToolContext(rt, {"id": "ep-1"})
    assert await tool.fn(ctx, name="you") == {"greeting": "hello, you"}
    stage = rt.registries.stages.get("hello")
    grant = plugin.Grant("inbox", ("inbox",), ())
    result = await stage.route(plugin.RoutingContext({}, {}, grant))
    assert result == plugin.StageResult()
    with pytest.raises(plugin.RuleValidationError, match="params.hello"):
        await stage.validate(plugin.RoutingConfig(params={"hello": 1}))
    assert "hello" not in [s.name for s in rt.stages]  # not in routing.stages: never runs


def test_hello_routes_startup_and_shutdown(hello_pm: pluggy.PluginManager, tmp_path: Path) -> None:
    from sanic import Sanic

    rt = Runtime(load_config(env={"SWITCHBOARD_DATA_DIR": str(tmp_path)}), pm=hello_pm)
    app: Sanic[Any, Any] = Sanic(f"hello_hooks_{id(rt)}", configure_logging=False)
    _call_hello(hello_pm, "switchboard_register_routes", app=app, runtime=rt)
    assert "hello" in {route.path for route in app.router.routes}

    _call_hello(hello_pm, "switchboard_startup", runtime=rt, app=rt)
    assert rt.state["hello"]["started"] is True
    _call_hello(hello_pm, "switchboard_shutdown", runtime=rt, app=rt)
    assert "hello" not in rt.state


class _SectionRecorder:
    """A plugin with one defaulted setting that records the section it registers with."""

    def __init__(self) -> None:
        self.sections: list[dict[str, Any]] = []

    @plugin.hookimpl
    def switchboard_config_schema(self) -> dict[str, Any]:
        return {"type": "object", "properties": {"mood": {"type": "string", "default": "calm"}}}

    @plugin.hookimpl
    def switchboard_register_commands(self, register: Any, config: dict[str, Any]) -> None:
        self.sections.append(config)


def test_registration_hooks_get_their_section_with_defaults(tmp_path: Path) -> None:
    recorder = _SectionRecorder()
    pm = make_plugin_manager()
    pm.register(recorder, name="recorder")
    Runtime(load_config(env={"SWITCHBOARD_DATA_DIR": str(tmp_path)}), pm=pm)
    assert recorder.sections == [{"mood": "calm"}]


def test_registration_without_a_config_still_fills_schema_defaults() -> None:
    recorder = _SectionRecorder()
    pm = make_plugin_manager()
    pm.register(recorder, name="recorder")
    build_registries(pm)
    assert recorder.sections == [{"mood": "calm"}]
