"""Operator commands for webhooks and their routes (the same service code MCP calls)."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import InvalidArgument
from ..runtime import Runtime
from ..service import refusals, reroute, rules, versions, webhooks
from .files import parse_json, read_json, read_text
from .main import emit, warn_default_base_url
from .read import render_refusals, render_webhooks
from .render import add_output_flags, show


def configure(p: argparse.ArgumentParser, runtime: Runtime | None = None) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    sources = ", ".join(runtime.registries.sources.names()) if runtime else "see `plugins`"
    create = sub.add_parser("create", help="create a webhook owned by an endpoint")
    create.add_argument("--endpoint", required=True, metavar="ID", help="the owning endpoint")
    create.add_argument(
        "--source", required=True, metavar="S", help=f"source type (installed: {sources})"
    )
    create.add_argument("--target-queue", required=True, metavar="Q")
    create.add_argument(
        "--secret-file",
        metavar="F",
        help="import the producer's own signing secret from F ('-': stdin);"
        " it is stored sealed and never shown again",
    )
    create.add_argument(
        "--source-config",
        metavar="JSON",
        help="the source's configuration (JSON, or @FILE): the hmac source's signature scheme",
    )
    lst = sub.add_parser("list", help="list webhooks (never their secrets nor ingest URLs)")
    lst.add_argument("--owner", metavar="H", help="only the webhooks of this human (name or id)")
    add_output_flags(lst)
    rotate = sub.add_parser(
        "rotate",
        help="mint a new ingest token (and signing secret); the previous ones keep"
        " working for [ingest] rotation_overlap_hours (default 24)",
    )
    rotate.add_argument("webhook_id", metavar="WEBHOOK_ID")
    rotate.add_argument(
        "--secret-file",
        metavar="F",
        help="import the producer's new signing secret from F ('-': stdin)",
    )
    delete = sub.add_parser("delete", help="delete a webhook (its events stay)")
    delete.add_argument("webhook_id", metavar="WEBHOOK_ID")
    refusals_p = sub.add_parser(
        "refusals",
        help="deliveries the webhook refused (401), newest first, with their reason code",
    )
    refusals_p.add_argument("webhook_id", metavar="WEBHOOK_ID")
    refusals_p.add_argument(
        "--limit", type=int, default=None, metavar="N", help="how many (default 20)"
    )
    add_output_flags(refusals_p)
    route = sub.add_parser("route", help="manage a webhook's extra delivery targets")
    rsub = route.add_subparsers(dest="route_action", metavar="ACTION", required=True)
    for name, help in (
        ("add", "route deliveries to another endpoint"),
        ("remove", "stop routing to an endpoint"),
    ):
        r = rsub.add_parser(name, help=help)
        r.add_argument("webhook_id", metavar="WEBHOOK_ID")
        r.add_argument("target_endpoint_id", metavar="TARGET_ENDPOINT_ID")
    rlist = rsub.add_parser("list", help="list a webhook's routes")
    rlist.add_argument("webhook_id", metavar="WEBHOOK_ID")
    _configure_rules(sub)
    reroute = sub.add_parser(
        "reroute", help="re-route stored deliveries through the current rules (new todos only)"
    )
    reroute.add_argument("webhook_id", metavar="WEBHOOK_ID")
    mode = reroute.add_mutually_exclusive_group(required=True)
    mode.add_argument("--plan", action="store_true", help="show what would change; save nothing")
    mode.add_argument("--apply", action="store_true", help="create the planned todos")
    window = reroute.add_mutually_exclusive_group()
    window.add_argument("--last", type=int, metavar="N", help="the newest N events (default 1000)")
    window.add_argument("--since", metavar="WHEN", help="events since a duration or timestamp")
    window.add_argument("--cursor", metavar="CURSOR", help="next_cursor of the previous run")
    window.add_argument(
        "--changes-cursor",
        metavar="CURSOR",
        help="changes_cursor of a plan: its next page of changed events (--plan)",
    )
    reroute.add_argument(
        "--event-id",
        dest="event_ids",
        action="append",
        metavar="ID",
        help="only this stored event (repeat for more)",
    )
    reroute.add_argument(
        "--disposition",
        metavar="D",
        help="only the events stored with this disposition (routed, dropped, repeat, held)",
    )


def _configure_rules(sub: Any) -> None:
    """``webhook rules show|set|history|rollback``: a webhook's live rules, as the operator."""
    rules = sub.add_parser("rules", help="see and change a webhook's live routing rules")
    rsub = rules.add_subparsers(dest="rules_action", metavar="ACTION", required=True)
    show_p = rsub.add_parser("show", help="the live rules, their version and hash")
    show_p.add_argument("webhook_id", metavar="WEBHOOK_ID")
    show_p.add_argument(
        "rules_version",
        nargs="?",
        type=int,
        metavar="VERSION",
        help="an earlier version instead (its whole config)",
    )
    set_p = rsub.add_parser("set", help="save a routing config as a new version")
    set_p.add_argument("webhook_id", metavar="WEBHOOK_ID")
    set_p.add_argument(
        "file",
        metavar="FILE",
        help="{rules, default_action?, params?, on_fault?, lanes?, events_days?} ('-': stdin);"
        " a key left out (params, on_fault, lanes, events_days) keeps the stored one, null"
        " resets it",
    )
    history = rsub.add_parser("history", help="the versions, newest first")
    history.add_argument("webhook_id", metavar="WEBHOOK_ID")
    history.add_argument("--limit", type=int, metavar="N", help="versions per page (default 50)")
    history.add_argument("--cursor", metavar="CURSOR", help="next_cursor of the previous page")
    rollback = rsub.add_parser("rollback", help="save an earlier version again, as a new one")
    rollback.add_argument("webhook_id", metavar="WEBHOOK_ID")
    rollback.add_argument("rules_version", type=int, metavar="VERSION")
    for p in (set_p, rollback):
        p.add_argument(
            "--expect-version",
            type=int,
            metavar="N",
            help="refuse (conflict) unless the webhook is still at version N",
        )
        p.add_argument("--note", metavar="TEXT", help="why: kept with the version")
    set_p.add_argument(
        "--diffed", metavar="HASH", help="the candidate_hash `switchboard rules diff` answered"
    )


def _secret_file(path: str | None) -> str | None:
    """The secret in ``path`` (one line; its trailing newline is not part of it)."""
    if path is None:
        return None
    return read_text(path, "--secret-file", stdin=True).strip("\r\n")


def _source_config(text: str | None) -> Any:
    if text is None:
        return None
    if text.startswith("@"):
        return read_json(text[1:], "--source-config")
    return parse_json(text, "--source-config")


async def run(args: argparse.Namespace, rt: Runtime) -> int:
    doc: Any
    if args.action == "create":
        endpoint = await rt.store.get_endpoint(args.endpoint)
        doc = await webhooks.create_webhook(
            rt,
            endpoint,
            args.source,
            args.target_queue,
            signing_secret=_secret_file(args.secret_file),
            source_config=_source_config(args.source_config),
        )
        warn_default_base_url(rt)  # its ingest_url is pasted into a producer
        doc = {
            k: doc[k]
            for k in (
                "webhook_id",
                "ingest_url",
                "signing_secret",
                "signing_secret_imported",
                "source_type",
                "target_queue",
                "trust_mode",
                "source_config",
            )
            if k in doc
        }
    elif args.action == "list":
        show(args, await webhooks.list_all_webhooks(rt, owner=args.owner), render_webhooks)
        return 0
    elif args.action == "refusals":
        doc = await refusals.list_refusals(rt, None, args.webhook_id, limit=args.limit)
        show(args, doc, render_refusals)
        return 0
    elif args.action == "rotate":
        doc = await webhooks.rotate_webhook(
            rt, None, args.webhook_id, signing_secret=_secret_file(args.secret_file)
        )
    elif args.action == "delete":
        doc = await webhooks.delete_webhook(rt, None, args.webhook_id)
    elif args.action == "rules":
        doc = await _run_rules(args, rt)
    elif args.action == "reroute":
        doc = await reroute.reroute_events(
            rt,
            None,
            args.webhook_id,
            last=args.last,
            since=args.since,
            cursor=args.cursor,
            changes_cursor=args.changes_cursor,
            event_ids=args.event_ids,
            disposition=args.disposition,
            plan=not args.apply,
        )
    elif args.route_action == "add":
        doc = await webhooks.add_route(rt, None, args.webhook_id, args.target_endpoint_id)
    elif args.route_action == "remove":
        doc = await webhooks.remove_route(rt, None, args.webhook_id, args.target_endpoint_id)
    else:
        doc = await webhooks.list_routes(rt, None, args.webhook_id)
    emit(doc)
    return 0


def _config_file(path: str) -> dict[str, Any]:
    doc = read_json(path, "FILE", stdin=True)
    if not isinstance(doc, dict) or not isinstance(doc.get("rules"), list):
        raise InvalidArgument("FILE: needs an object with a rules list")
    unknown = sorted(set(doc) - {"rules", "default_action", "params", *rules.POLICY_KEYS})
    if unknown:
        raise InvalidArgument(f"FILE: unknown keys {', '.join(map(repr, unknown))}")
    return doc


async def _run_rules(args: argparse.Namespace, rt: Runtime) -> Any:
    hook = args.webhook_id
    if args.rules_action == "show":
        if args.rules_version is not None:
            return await versions.get_version(rt, None, hook, args.rules_version)
        return await rules.list_rules(rt, None, hook)
    if args.rules_action == "set":
        doc = _config_file(args.file)
        return await rules.set_rules(
            rt,
            None,
            hook,
            doc["rules"],
            doc.get("default_action"),
            doc["params"] if "params" in doc else rules.KEEP,
            **{key: doc[key] for key in rules.POLICY_KEYS if key in doc},
            expect_version=args.expect_version,
            diffed=args.diffed,
            note=args.note,
        )
    if args.rules_action == "history":
        return await versions.list_versions(rt, None, hook, limit=args.limit, cursor=args.cursor)
    return await rules.rollback_rules(
        rt, None, hook, args.rules_version, expect_version=args.expect_version, note=args.note
    )
