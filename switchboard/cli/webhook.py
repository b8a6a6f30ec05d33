"""Operator commands for webhooks and their routes (the same service code MCP calls)."""

from __future__ import annotations

import argparse
from typing import Any

from ..runtime import Runtime
from ..service import webhooks
from .main import emit


def configure(p: argparse.ArgumentParser, runtime: Runtime | None = None) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    sources = ", ".join(runtime.registries.sources.names()) if runtime else "see `plugins`"
    create = sub.add_parser("create", help="create a webhook owned by an endpoint")
    create.add_argument("--endpoint", required=True, metavar="ID", help="the owning endpoint")
    create.add_argument("--source", required=True, metavar="S",
                        help=f"source type (installed: {sources})")
    create.add_argument("--target-queue", required=True, metavar="Q")
    rotate = sub.add_parser("rotate", help="mint a new ingest token (and signing secret)")
    rotate.add_argument("webhook_id", metavar="WEBHOOK_ID")
    delete = sub.add_parser("delete", help="delete a webhook (its events stay)")
    delete.add_argument("webhook_id", metavar="WEBHOOK_ID")
    route = sub.add_parser("route", help="manage a webhook's extra delivery targets")
    rsub = route.add_subparsers(dest="route_action", metavar="ACTION", required=True)
    for name, help in (("add", "route deliveries to another endpoint"),
                       ("remove", "stop routing to an endpoint")):
        r = rsub.add_parser(name, help=help)
        r.add_argument("webhook_id", metavar="WEBHOOK_ID")
        r.add_argument("target_endpoint_id", metavar="TARGET_ENDPOINT_ID")
    rlist = rsub.add_parser("list", help="list a webhook's routes")
    rlist.add_argument("webhook_id", metavar="WEBHOOK_ID")


async def run(args: argparse.Namespace, rt: Runtime) -> int:
    doc: Any
    if args.action == "create":
        endpoint = await rt.store.get_endpoint(args.endpoint)
        doc = await webhooks.create_webhook(rt, endpoint, args.source, args.target_queue)
        doc = {k: doc[k] for k in ("webhook_id", "ingest_url", "signing_secret",
                                   "source_type", "target_queue", "trust_mode") if k in doc}
    elif args.action == "rotate":
        doc = await webhooks.rotate_webhook(rt, None, args.webhook_id)
    elif args.action == "delete":
        doc = await webhooks.delete_webhook(rt, None, args.webhook_id)
    elif args.route_action == "add":
        doc = await webhooks.add_route(rt, None, args.webhook_id, args.target_endpoint_id)
    elif args.route_action == "remove":
        doc = await webhooks.remove_route(rt, None, args.webhook_id, args.target_endpoint_id)
    else:
        doc = await webhooks.list_routes(rt, None, args.webhook_id)
    emit(doc)
    return 0
