"""``switchboard mcp --token TOKEN``: the same tools over stdio for local MCP clients."""

from __future__ import annotations

import argparse
import os
import sys

from switchboard.errors import Forbidden
from switchboard.runtime import Runtime
from switchboard.service.identity import authenticate

TOKEN_ENV = "SWITCHBOARD_MCP_TOKEN"


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--token",
        default=None,
        metavar="TOKEN",
        help=f"the endpoint token `endpoint vend` printed (or set {TOKEN_ENV})",
    )


async def run(args: argparse.Namespace, rt: Runtime) -> int:
    token = args.token or os.environ.get(TOKEN_ENV)
    if not token:
        print(f"switchboard: error: give --token or set {TOKEN_ENV}", file=sys.stderr)
        return 2
    # Refuse a bad token before speaking MCP at all; later requests re-check it.
    try:
        await authenticate(rt, token)
    except Forbidden as exc:
        print(f"switchboard: error: forbidden: {exc}", file=sys.stderr)
        return 1
    from .auth import token_caller
    from .server import build_server

    server = build_server(rt, token_caller(rt, token))
    await server.run_stdio_async()
    return 0
