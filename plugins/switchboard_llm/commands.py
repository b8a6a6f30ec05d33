"""``switchboard llm get|set|clear --endpoint ID``: an endpoint's LLM triage, for operators."""

from __future__ import annotations

import argparse
import json
from typing import Any

from switchboard.plugin import CommandRegistry, InvalidArgument, Runtime, read_json

from . import service


def configure(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    get = sub.add_parser("get", help="show an endpoint's triage settings and budget usage")
    get.add_argument("--endpoint", required=True, metavar="ID")
    put = sub.add_parser("set", help="validate and save an endpoint's llm_triage document")
    put.add_argument("--endpoint", required=True, metavar="ID")
    put.add_argument(
        "--file",
        required=True,
        metavar="FILE",
        help="the llm_triage JSON document ('-' reads stdin)",
    )
    clear = sub.add_parser("clear", help="turn an endpoint's triage off")
    clear.add_argument("--endpoint", required=True, metavar="ID")


def _read(path: str) -> Any:
    return read_json(path, "--file", stdin=True)


async def run(args: argparse.Namespace, rt: Runtime) -> int:
    if args.action == "get":
        doc = await service.get_triage(rt, args.endpoint)
    elif args.action == "set":
        config = _read(args.file)
        if config is None:
            raise InvalidArgument("--file: use `switchboard llm clear` to turn triage off")
        doc = await service.set_triage(rt, args.endpoint, config)
    else:
        doc = await service.set_triage(rt, args.endpoint, None)
    print(json.dumps(doc, indent=2))
    return 0


def register(register: CommandRegistry) -> None:
    register.add_command("llm", configure, run, help="get, set or clear an endpoint's LLM triage")
