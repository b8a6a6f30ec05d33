"""``switchboard rules check|test`` (offline) and ``rules diff|explain|lint`` (over history)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from switchboard.plugin import (
    CommandRegistry,
    Grant,
    InvalidArgument,
    RuleValidationError,
    Runtime,
    dry_run,
    read_json,
    sample_envelope,
    validate_config,
)

from . import history_cli

if TYPE_CHECKING:
    # ``rules packs`` and the history verbs run the host's service layer, which takes the
    # host's runtime (what the CLI hands a command), not only the contract's view of it.
    from switchboard.runtime import Runtime as HostRuntime

DEFAULT_GRANT = {
    "target_queue": "inbox",
    "queues": ["inbox"],
    "endpoints": ["owner"],
    "endpoint_queues": {"owner": ["inbox"]},
}


def _emit(doc: Any) -> None:
    print(json.dumps(doc, indent=2))


def _grant(path: str | None) -> Grant:
    doc = DEFAULT_GRANT if path is None else read_json(path, "--grant")
    if not isinstance(doc, dict) or not isinstance(doc.get("target_queue"), str):
        raise InvalidArgument("--grant: needs an object with a target_queue string")
    history_cli.refuse_unknown_keys(doc, tuple(DEFAULT_GRANT), "--grant")
    return Grant.from_json(doc)


def _configure_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="routing config: {rules, default_action?, params?}")
    p.add_argument(
        "--grant",
        metavar="GRANT.json",
        help='{"target_queue", "queues":[...], "endpoints":[...],'
        ' "endpoint_queues": {endpoint: [queues it drains]}} (default: inbox /'
        ' ["inbox"] / ["owner"] draining inbox; exclusive needs a drainer)',
    )


def configure(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    check = sub.add_parser("check", help="validate a routing config (exit 2 with the error)")
    _configure_common(check)
    test = sub.add_parser("test", help="validate, then route one sample delivery through it")
    _configure_common(test)
    test.add_argument("--source", required=True, metavar="S")
    test.add_argument(
        "--payload",
        required=True,
        metavar="BODY",
        help="the raw body: a file path, or the body itself",
    )
    test.add_argument("--headers", metavar="HEADERS.json", help="the producer's headers")
    test.add_argument("--verified", choices=["true", "false"], default=None)
    test.add_argument("--webhook-id", default="dry-run", metavar="ID")
    history_cli.configure(sub)


async def run(args: argparse.Namespace, rt: HostRuntime) -> int:
    if args.action in history_cli.VERBS:
        return await history_cli.run(args, rt)
    grant = _grant(args.grant)
    config = read_json(args.file, "FILE")
    try:
        if args.action == "check":
            normalized = await validate_config(config, grant, rt.stages)
            _emit({"ok": True, "config": normalized.to_json()})
            return 0
        envelope = _sample(args, rt)
        # Offline (no ctx.runtime for the stages), but under the loaded config's budget.
        budget = rt.config.section("routing").get("stage_timeout_ms")
        result = await dry_run(
            rt.stages,
            config,
            envelope,
            grant,
            stage_timeout_ms=budget if isinstance(budget, int) else None,
        )
    except RuleValidationError as exc:
        # One line on stderr (the message's own newlines escaped), exit 2: a bad input file
        error = {"code": exc.code, "message": exc.message, "index": exc.index}
        print(json.dumps({"error": error}), file=sys.stderr)
        return 2
    del result["config"]
    _emit(result)
    return 0


def _sample(args: argparse.Namespace, rt: Runtime) -> dict[str, Any]:
    source = rt.registries.sources.get(args.source)
    if source is None:
        raise InvalidArgument(f"--source: unknown source {args.source!r}")
    path = Path(args.payload)
    body = path.read_bytes() if path.is_file() else args.payload.encode()
    headers = read_json(args.headers, "--headers") if args.headers else {}
    if not isinstance(headers, dict):
        raise InvalidArgument("--headers: must be a JSON object of header names to values")
    return sample_envelope(
        rt.registries.projections,
        sources=rt.registries.sources,
        source=args.source,
        trust_mode=source.trust_mode,
        webhook_id=args.webhook_id,
        body=body,
        headers={str(k): str(v) for k, v in headers.items()},
        verified=None if args.verified is None else args.verified == "true",
    )


def configure_packs(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", nargs="?", metavar="PACK", help="show only this pack")


async def run_packs(args: argparse.Namespace, rt: HostRuntime) -> int:
    from switchboard.service import packs

    listed = packs.list_packs(rt)["packs"]
    if args.name is not None:
        listed = [p for p in listed if p["name"] == args.name]
        if not listed:
            raise InvalidArgument(
                f"PACK: no rule pack {args.name!r} "
                f"(installed: {', '.join(rt.registries.rule_packs.names())})"
            )
    _emit({"packs": listed})
    return 0


def register(register: CommandRegistry) -> None:
    # check and test run offline; diff, explain and lint open the database themselves
    register.add_command(
        "rules",
        configure,
        run,
        needs_store=False,
        help="check or test a routing config offline; diff, explain or lint"
        " it over a webhook's stored events",
    )
    register.add_command(
        "packs",
        configure_packs,
        run_packs,
        needs_store=False,
        help="list the rule packs plugins offer (install_rule_pack installs one)",
    )
