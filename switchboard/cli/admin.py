"""Operator commands: migrate, plugins, human, friend and endpoint."""

from __future__ import annotations

import argparse
from typing import Any

from ..plugins import list_plugins
from ..registry import CommandRegistry
from ..runtime import Runtime
from ..service import identity
from .columns import Col
from .main import emit, warn_default_base_url
from .render import Column, add_output_flags, show, table


def _csv(value: str) -> list[str]:
    """``a,b`` or ``a b`` (each a word of ``nargs="+"``): the names, each one given.

    An empty one (``''``, ``a,,b``, a trailing comma) is refused, not dropped: an unset
    shell variable would otherwise vend an endpoint that drains or may use nothing."""
    names = [v.strip() for v in value.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(
            f"an empty name in {value!r}: give names separated by commas or spaces"
        )
    return names


def _list_arg(parser: argparse.ArgumentParser, flag: str, help: str) -> None:
    parser.add_argument(flag, nargs="+", default=[], type=_csv, metavar="Q", help=help)


def _flat(values: list[list[str]]) -> list[str]:
    return [v for group in values for v in group]


async def cmd_migrate(args: argparse.Namespace, rt: Runtime) -> int:
    applied = await rt.migrate()
    emit({"applied": applied})
    return 0


async def cmd_plugins(args: argparse.Namespace, rt: Runtime) -> int:
    out = []
    for p in list_plugins(rt.pm):
        entry: dict[str, Any] = {
            "name": p.name,
            "version": p.version,
            "distribution": p.distribution,
            "hooks": list(p.hooks),
        }
        provides = provided_by(rt, p.name)
        if provides:
            entry["provides"] = provides
        out.append(entry)
    emit(out)
    return 0


def provided_by(rt: Runtime, plugin: str) -> dict[str, list[str]]:
    """What ``plugin`` registered, by registry (``sources``, ``stages``, ``llm_providers``
    ...); ``enabled_stages`` are its stages that ``routing.stages`` runs, in that order."""
    regs = rt.registries
    out: dict[str, list[str]] = {}
    for attr in (
        "sources",
        "projections",
        "subjects",
        "stages",
        "sinks",
        "llm_providers",
        "rule_packs",
        "mcp_tools",
        "commands",
    ):
        registry = getattr(regs, attr)
        names = [n for n in registry.names() if registry.owner(n) == plugin]
        if names:
            out[attr] = names
    enabled = [s.name for s in rt.stages if regs.stages.owner(s.name) == plugin]
    if enabled:
        out["enabled_stages"] = enabled
    return out


# the id and times stay whole (render.table): the creation time is left to the JSON
HUMAN_COLUMNS: list[Column] = [
    ("NAME", lambda r: r["name"]),
    ("ENDPOINTS", lambda r: r["endpoints"]),
    ("LIVE", lambda r: r["live_endpoints"]),
    ("ID", lambda r: r["human_id"]),
]

FRIEND_COLUMNS: list[Column] = [
    ("FROM", lambda r: r["from"]),
    ("TO", lambda r: r["to"]),
    ("STATE", lambda r: r["state"]),
    ("CREATED", lambda r: r["created_at"]),
    ("UPDATED", lambda r: r["updated_at"]),
]


def _verbs(known: list[str]) -> Any:
    """An endpoint's verbs in a cell: "all (N)" when it may call every installed one."""

    def get(row: dict[str, Any]) -> str:
        verbs = list(row.get("verbs") or ())
        if known and set(verbs) >= set(known):
            return f"all ({len(verbs)})"
        return f"{len(verbs)}: {', '.join(verbs)}" if verbs else "none"

    return get


def _joined(key: str) -> Any:
    return lambda r: ", ".join(r.get(key) or ()) or "-"


def endpoint_columns(known_verbs: list[str]) -> list[Col]:
    """``endpoint list``'s plan (switchboard.cli.columns): six key columns, then the
    low-value ones, which go below their width in the order listed from the last."""
    return [
        Col("ID", lambda r: r["endpoint_id"], kind="id"),
        Col("OWNER", lambda r: r.get("owner_name"), min_width=6),
        Col("NAME", lambda r: r["name"], min_width=8),
        Col("STATE", lambda r: r["state"], min_width=7),
        Col("QUEUES", _joined("scope_queues"), min_width=8),
        Col("VERBS", _verbs(known_verbs), min_width=8),
        Col("WEBHOOK QUEUES", _joined("webhook_queues"), drop_below=100),
        Col("MAX", lambda r: r.get("webhook_max"), justify="right", drop_below=110),
        Col("SOURCES", _joined("webhook_source_types"), drop_below=120),
        Col("EXPIRES", lambda r: r.get("expires_at"), kind="time", drop_below=140),
        Col("CREATED", lambda r: r.get("created_at"), kind="time", drop_below=150),
    ]


def conf_human(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = sub.add_parser("add", help="add a human (an owner of endpoints)")
    add.add_argument("name")
    lst = sub.add_parser("list", help="list humans, with how many endpoints each owns")
    add_output_flags(lst)


async def cmd_human(args: argparse.Namespace, rt: Runtime) -> int:
    if args.action == "list":
        show(
            args,
            await identity.list_humans(rt),
            lambda out, doc: out.print(table("humans", HUMAN_COLUMNS, doc["humans"])),
        )
        return 0
    emit(await identity.add_human(rt, args.name))
    return 0


def conf_friend(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = sub.add_parser(
        "add", help="approve a directed friendship: FROM's webhooks may route to TO's endpoints"
    )
    add.add_argument("from_human", metavar="FROM")
    add.add_argument("to_human", metavar="TO")
    add.add_argument("--state", default="approved", choices=["pending", "approved", "revoked"])
    lst = sub.add_parser("list", help="list friendships (those HUMAN is on either side of)")
    lst.add_argument("human", metavar="HUMAN", nargs="?", help="a human's name or id")
    add_output_flags(lst)
    remove = sub.add_parser(
        "remove",
        help="delete the friendship FROM -> TO and the routes from FROM's webhooks"
        " to TO's endpoints it authorized",
    )
    remove.add_argument("from_human", metavar="FROM")
    remove.add_argument("to_human", metavar="TO")


async def cmd_friend(args: argparse.Namespace, rt: Runtime) -> int:
    if args.action == "list":
        show(
            args,
            await identity.list_friends(rt, args.human),
            lambda out, doc: out.print(
                table(
                    "friendships (FROM's webhooks may route to TO's endpoints while approved)",
                    FRIEND_COLUMNS,
                    doc["friendships"],
                )
            ),
        )
        return 0
    if args.action == "remove":
        emit(await identity.remove_friend(rt, args.from_human, args.to_human))
        return 0
    emit(await identity.add_friend(rt, args.from_human, args.to_human, args.state))
    return 0


def conf_endpoint(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    vend = sub.add_parser("vend", help="create an endpoint and print its token (shown once)")
    vend.add_argument("--owner", required=True, metavar="NAME", help="the owning human")
    vend.add_argument("--name", required=True, metavar="NAME")
    _list_arg(vend, "--queues", "queues the endpoint may drain (its scope)")
    _list_arg(vend, "--webhook-queues", "queues its webhooks may target")
    _list_arg(vend, "--source-types", "source types its webhooks may use")
    vend.add_argument(
        "--webhook-max",
        type=int,
        default=0,
        metavar="N",
        help="how many webhooks it may own (default 0)",
    )
    vend.add_argument(
        "--verbs",
        nargs="+",
        type=_csv,
        default=None,
        metavar="VERB",
        help="MCP verbs it may call (default: all installed; an endpoint that may own no"
        " webhooks gets none of the webhook-changing ones unless named here)",
    )
    vend.add_argument("--expires-in", type=int, default=None, metavar="SECONDS")
    lst = sub.add_parser("list", help="list endpoints (never their tokens)")
    add_output_flags(lst)
    show_ = sub.add_parser(
        "show", help="one endpoint: its scope and its effective verbs (never its token)"
    )
    show_.add_argument("endpoint_id", metavar="ID")
    revoke = sub.add_parser("revoke", help="revoke an endpoint")
    revoke.add_argument("endpoint_id", metavar="ID")


async def cmd_endpoint(args: argparse.Namespace, rt: Runtime) -> int:
    doc: Any
    if args.action == "vend":
        doc = await identity.vend_endpoint(
            rt,
            owner=args.owner,
            name=args.name,
            queues=_flat(args.queues),
            webhook_queues=_flat(args.webhook_queues),
            source_types=_flat(args.source_types),
            webhook_max=args.webhook_max,
            verbs=_flat(args.verbs) if args.verbs is not None else None,
            expires_in_seconds=args.expires_in,
        )
        warn_default_base_url(rt)  # its mcp_url is pasted into an agent's config
    elif args.action == "list":
        plan = endpoint_columns(identity.known_verbs(rt))
        show(
            args,
            await identity.list_endpoints(rt),
            lambda out, doc: out.print(table("endpoints", plan, doc)),
        )
        return 0
    elif args.action == "show":
        doc = await identity.show_endpoint(rt, args.endpoint_id)
    else:
        doc = await identity.revoke_endpoint(rt, args.endpoint_id)
    emit(doc)
    return 0


def register(register: CommandRegistry) -> None:
    register.add_command(
        "migrate", lambda p: None, cmd_migrate, needs_store=False, help="apply database migrations"
    )
    register.add_command(
        "plugins",
        lambda p: None,
        cmd_plugins,
        needs_store=False,
        help="list loaded plugins: name, version, distribution, hooks, what each provides",
    )
    # `human add` is the first step on a new install, so it may create the database;
    # every other verb needs one already there (endpoint vend needs a human anyway).
    register.add_command(
        "human",
        conf_human,
        cmd_human,
        help="add and list humans",
        creates_database=lambda args: args.action == "add",
    )
    register.add_command("friend", conf_friend, cmd_friend, help="add, list and remove friendships")
    register.add_command(
        "endpoint", conf_endpoint, cmd_endpoint, help="vend, list, show, revoke endpoints"
    )
