"""Build the MCP server from the tool registry: verb scope, caller injection, error mapping."""

from __future__ import annotations

import inspect
import logging
import sys
from collections.abc import Awaitable, Callable
from typing import Any, cast

import anyio
from mcp.server.auth.provider import TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.context import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.stdio import stdio_server
from mcp_types import CallToolResult, InputRequiredResult, TextContent
from pydantic import AnyHttpUrl, ValidationError

from switchboard import __version__
from switchboard.errors import PluginError, SwitchboardError, mcp_code
from switchboard.registry import MCPTool, MCPToolRegistry
from switchboard.runtime import Runtime

from .arguments import ArgumentCheck, as_given, unknown_arguments
from .context import CALLER, TOOL_CONTEXT, ToolContext
from .jsonrpc import ScreenedLines

log = logging.getLogger("switchboard.mcp")

#: Finds the endpoint behind one inbound request (None: not authenticated).
CallerResolver = Callable[[ServerRequestContext[Any, Any]], Awaitable[dict[str, Any] | None]]

INSTRUCTIONS = (
    "Switchboard turns verified webhook deliveries into routed todos. Manage your webhooks, "
    "their routes and routing rules, inspect stored events, and drain your queues with "
    "claim_next / complete / fail / heartbeat. Errors read '<code>: <message>'."
)


def tool_error(code: str, message: str) -> CallToolResult:
    """The one shape of a refused call: an isError result whose text is ``code: message``."""
    return CallToolResult(
        content=[TextContent(type="text", text=f"{code}: {message}")], is_error=True
    )


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "arguments"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


def error_result(tool: str, exc: BaseException) -> CallToolResult:
    """Map what a tool raised to its MCP error code: the only place that does."""
    cause = exc.__cause__ if isinstance(exc, ToolError) and exc.__cause__ is not None else exc
    if isinstance(cause, ValidationError):
        return tool_error("invalid_argument", _validation_message(cause))
    if isinstance(cause, SwitchboardError):
        code = mcp_code(cause)
        if code == "internal":
            log.error("tool %r failed: %s", tool, cause)
        return tool_error(code, str(cause))
    log.error("tool %r raised an unexpected error", tool, exc_info=cause)
    return tool_error("internal", "internal error")


def adapt(tool: MCPTool) -> Callable[..., Awaitable[Any]]:
    """The registered ``fn(ctx, **arguments)`` as an SDK tool function of ``**arguments``.

    The SDK derives the input and output schemas from the signature, so the wrapper
    carries ``fn``'s signature minus its first (ToolContext) parameter.
    """
    fn = tool.fn
    try:
        sig = inspect.signature(fn, eval_str=True)
    except (NameError, TypeError) as exc:
        raise PluginError(f"MCP tool {tool.name!r}: cannot read its signature: {exc}") from exc
    params = list(sig.parameters.values())
    if not params:
        raise PluginError(f"MCP tool {tool.name!r}: fn must take the ToolContext first")

    async def call(**arguments: Any) -> Any:
        ctx = TOOL_CONTEXT.get()
        if ctx is None:
            raise RuntimeError("tool called outside a Switchboard MCP request")
        return await fn(ctx, **arguments)

    call.__signature__ = sig.replace(parameters=params[1:])  # type: ignore[attr-defined]
    call.__name__ = tool.name
    call.__doc__ = tool.description
    return call


def closed_tool(tool: MCPTool) -> Tool:
    """The SDK tool for ``tool``, its input schema closed (``additionalProperties: false``):
    :meth:`SwitchboardMCP.call_tool` refuses what the schema does not name, or does not
    type as given, and the tool takes the values as they came (see :mod:`.arguments`)."""
    sdk_tool = Tool.from_function(adapt(tool), name=tool.name, description=tool.description)
    sdk_tool.parameters["additionalProperties"] = False
    sdk_tool.fn_metadata = as_given(sdk_tool.fn_metadata)
    return sdk_tool


class SwitchboardMCP(MCPServer[Any]):
    """An MCPServer whose tools come from the registry and run as an authenticated endpoint."""

    def __init__(
        self,
        runtime: Runtime,
        registry: MCPToolRegistry,
        resolve_caller: CallerResolver,
        *,
        token_verifier: TokenVerifier | None = None,
    ) -> None:
        self.runtime = runtime
        self._resolve_caller = resolve_caller
        self._registered = {t.name: t for t in registry}
        self._sdk_tools = {t.name: closed_tool(t) for t in registry}
        self._checks = {n: ArgumentCheck(t.parameters) for n, t in self._sdk_tools.items()}
        auth = None
        if token_verifier is not None:
            # The SDK applies a verifier only with AuthSettings; switchboard itself vends
            # the tokens, so there is no separate authorization server to advertise.
            auth = AuthSettings(
                issuer_url=AnyHttpUrl(runtime.config.base_url), resource_server_url=None
            )
        super().__init__(
            "switchboard",
            version=__version__,
            instructions=INSTRUCTIONS,
            tools=list(self._sdk_tools.values()),
            token_verifier=token_verifier,
            auth=auth,
            middleware=[self._with_caller],
            log_level="WARNING",
        )

    def verbs_of(self, caller: dict[str, Any]) -> set[str]:
        return set(caller.get("verbs") or ())

    async def _with_caller(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        """Resolve the caller for tools/list and tools/call; filter the list by verb scope."""
        if ctx.request_id is None or ctx.method not in ("tools/list", "tools/call"):
            return await call_next(ctx)
        caller = await self._resolve_caller(ctx)
        token = CALLER.set(caller)
        try:
            result = await call_next(ctx)
        finally:
            CALLER.reset(token)
        if ctx.method == "tools/list":
            allowed = self.verbs_of(caller) if caller else set()
            visible = {n for n, t in self._registered.items() if t.verb in allowed}
            if isinstance(result, dict) and isinstance(result.get("tools"), list):
                result = dict(
                    result, tools=[t for t in result["tools"] if t.get("name") in visible]
                )
        return result

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        """Check verb scope, hand the tool its ToolContext, and map every failure once."""
        tool = self._registered.get(name)
        sdk_tool = self._sdk_tools.get(name)
        if tool is None or sdk_tool is None:
            return tool_error("not_found", f"unknown tool {name!r}")
        caller = CALLER.get()
        if caller is None:
            return tool_error("forbidden", "invalid, revoked or expired token")
        if tool.verb not in self.verbs_of(caller):
            return tool_error(
                "forbidden",
                f"verb {tool.verb!r} is not in this endpoint's scope;"
                " the verbs an endpoint may call are set when it is vended:"
                " `switchboard endpoint vend --verbs ...`",
            )
        # Before anything runs, on every transport: what the tool does not take, then any
        # value that is not the JSON type its schema names (never converted, see .arguments).
        refused = unknown_arguments(sdk_tool, arguments or {})
        if refused is None:
            refused = self._checks[name].problem(arguments or {})
        if refused is not None:
            return tool_error("invalid_argument", refused)
        if context is None:
            context = Context(mcp_server=self)
        given = frozenset(arguments or ())
        token = TOOL_CONTEXT.set(
            ToolContext(self.runtime, caller, given=given, progress=_progress_of(context))
        )
        try:
            result = await sdk_tool.run(arguments, context, convert_result=True)
        except ToolError as exc:
            return error_result(name, exc)
        finally:
            TOOL_CONTEXT.reset(token)
        if not isinstance(result, CallToolResult | InputRequiredResult):
            return tool_error("internal", "tool returned an unexpected result")
        return result

    async def run_stdio_async(self) -> None:
        """Serve over stdio, answering the invalid requests the SDK's line reader would drop.

        Handing the SDK our own stdin skips its claim on fd 0 (pointing it at /dev/null);
        nothing in switchboard reads stdin, and the sandbox runs with stdin=DEVNULL.
        """
        lines = ScreenedLines(anyio.wrap_file(sys.stdin.buffer))
        # The SDK's reader only iterates its stdin, which ScreenedLines supports.
        stdin = cast("anyio.AsyncFile[str]", lines)
        async with stdio_server(stdin=stdin) as (read_stream, write_stream):
            lines.attach(write_stream.send)
            lowlevel = self._lowlevel_server
            await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())


def _progress_of(
    context: Context[Any, Any],
) -> Callable[[float, float | None, str | None], Awaitable[None]] | None:
    """The request's ``notifications/progress`` sender (a no-op without a ``progressToken``),
    or None outside a request."""
    try:
        session = context.request_context.session
    except ValueError:
        return None

    async def report(done: float, total: float | None, message: str | None) -> None:
        try:
            await session.report_progress(done, total, message)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # the client went away: the call is cancelled next

    return report


def build_server(
    rt: Runtime, resolve_caller: CallerResolver, *, token_verifier: TokenVerifier | None = None
) -> SwitchboardMCP:
    """A fresh server over every tool registered through ``switchboard_register_mcp_tools``."""
    return SwitchboardMCP(
        rt, rt.registries.mcp_tools, resolve_caller, token_verifier=token_verifier
    )
