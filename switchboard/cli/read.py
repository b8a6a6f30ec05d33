"""The operator's read verbs: ``events list|show`` and ``todos list`` (``webhook list`` is
in :mod:`.webhook`), and ``todos retry``. Each parses its arguments, calls the service the MCP tools call, and
prints JSON or a table (:mod:`.render`)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from ..routing.model import DISPOSITIONS
from ..runtime import Runtime
from ..service import events, todos
from .columns import Col
from .main import emit
from .prune import configure_prune, run_prune
from .render import (
    add_output_flags,
    bounded_int,
    cell,
    heading,
    json_block,
    key_values,
    show,
    table,
)

if TYPE_CHECKING:
    from rich.console import Console


def _trace(key: str) -> Any:
    return lambda r: (r.get("routing_trace") or {}).get(key)


def _rule(trace: dict[str, Any]) -> Any:
    """The rule that decided: its id, else its name, else its index."""
    for key in ("rule_id", "rule_name", "rule_index"):
        if trace.get(key) is not None:
            return trace[key]
    return None


# Column plans (switchboard.cli.columns): the key columns stay at 80 columns, truncated
# with "…"; the low-value ones go below their width, highest first. Ids and times shorten
# when a table would not fit whole; --json keeps every field in full.

WEBHOOK_COLUMNS: list[Col] = [
    Col("WEBHOOK", lambda r: r["webhook_id"], kind="id"),
    Col("OWNER", lambda r: r.get("owner_name"), min_width=6),
    Col("ENDPOINT", lambda r: r.get("endpoint_name") or r["endpoint_id"], min_width=8),
    Col("SOURCE", lambda r: r["source_type"], min_width=7),
    Col("QUEUE", lambda r: r["target_queue"], min_width=7),
    Col("RULES", lambda r: r["rule_count"], justify="right"),
    Col("TRUST", lambda r: r["trust_mode"], drop_below=100),
    Col("CREATED", lambda r: r["created_at"], kind="time", drop_below=120),
]


def waited(seconds: Any) -> str:
    """A pending event's wait, short: ``45s``, ``12m05s``, ``3h02m``, ``2d04h``; blank
    for an event that is not pending."""
    if seconds is None:
        return ""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


EVENT_COLUMNS: list[Col] = [
    Col("EVENT", lambda r: r["event_id"], kind="id"),
    Col("RECEIVED", lambda r: r["received_at"], kind="time"),
    Col("KIND", lambda r: r["kind"], min_width=8),
    Col("DISPOSITION", lambda r: r["disposition"]),
    Col("STAGE", _trace("stage"), min_width=7),
    Col("RULE", lambda r: _rule(r.get("routing_trace") or {}), min_width=6),
    Col("WAITING", lambda r: waited(r.get("waiting_s")), drop_below=90, justify="right"),
    Col("CAUSE", _trace("cause"), drop_below=100),
    Col("SOURCE", lambda r: r["source"], drop_below=110),
    Col("VERIFIED", lambda r: r["verified"], drop_below=120),
]

TODO_COLUMNS: list[Col] = [
    Col("TODO", lambda r: r["todo_id"], kind="id"),
    Col("ENDPOINT", lambda r: r.get("endpoint_name") or r["endpoint_id"], min_width=8),
    Col("QUEUE", lambda r: r["queue"], min_width=7),
    Col("STATE", lambda r: r["state"], min_width=7),
    Col("TITLE", lambda r: r["title"], min_width=16),
    Col("CREATED", lambda r: r["created_at"], kind="time", drop_below=90),
    Col("ATTEMPTS", lambda r: r["attempts"], justify="right", drop_below=100),
]


REFUSAL_COLUMNS: list[Col] = [
    Col("RECEIVED", lambda r: r["received_at"], kind="time"),
    Col("REASON", lambda r: r["reason"], min_width=14),
    Col("DETAIL", lambda r: r.get("detail"), min_width=16),
    Col("DELIVERY", lambda r: r.get("delivery_id"), kind="id"),
    Col("SOURCE IP", lambda r: r.get("source_ip"), drop_below=110),
    Col("SIZE", lambda r: r["size"], justify="right", drop_below=90),
]


def render_refusals(out: Console, doc: dict[str, Any]) -> None:
    title = f"refusals of webhook {doc['webhook_id']} (newest first)"
    out.print(table(title, REFUSAL_COLUMNS, doc["refusals"]))
    out.print(cell(f"{doc['total']} refused in all; the last {doc['kept']} are kept"))


def render_webhooks(out: Console, doc: dict[str, Any]) -> None:
    out.print(table("webhooks", WEBHOOK_COLUMNS, doc["webhooks"]))


def _render_events(out: Console, doc: dict[str, Any]) -> None:
    # A deleted webhook's events stay its owner's: the title says whose they were.
    deleted = doc.get("webhook_deleted_at")
    whose = f"deleted webhook {doc['webhook_id']}, deleted {deleted}" if deleted else None
    title = f"events of {whose or 'webhook ' + doc['webhook_id']} (newest first)"
    out.print(table(title, EVENT_COLUMNS, doc["events"]))
    if doc.get("next_cursor"):
        out.print(cell(f"more: --cursor {doc['next_cursor']}"))


def _render_event(out: Console, doc: dict[str, Any]) -> None:
    trace = doc.get("routing_trace") or {}
    out.print(
        key_values(
            f"event {doc['event_id']}",
            [
                (key, doc.get(key))
                for key in (
                    "webhook_id",
                    "source",
                    "kind",
                    "received_at",
                    "verified",
                    "trust_mode",
                    "content_type",
                    "size",
                    "disposition",
                )
            ]
            + [
                ("stage", trace.get("stage")),
                ("cause", trace.get("cause")),
                ("rule", _rule(trace)),
            ],
        )
    )
    headers = doc.get("headers") or {}
    out.print(
        table(
            "headers (sanitized)",
            [("NAME", lambda r: r["name"]), ("VALUE", lambda r: r["value"])],
            [{"name": k, "value": v} for k, v in headers.items()],
        )
    )
    out.print(heading("routing trace"))
    out.print(json_block(trace))
    fmt = doc.get("payload_format")
    more = " (truncated)" if doc.get("payload_truncated") else ""
    out.print(heading(f"payload ({fmt}){more}"))
    if fmt == "json":
        out.print(json_block(doc.get("payload")))
    elif fmt == "text":
        out.print(cell(doc.get("payload"), lines=True))
    out.print(table("todos", TODO_COLUMNS, doc.get("todos") or []))


def _render_todos(out: Console, doc: dict[str, Any]) -> None:
    out.print(table("todos (newest first)", TODO_COLUMNS, doc["todos"]))


def configure_events(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    lst = sub.add_parser("list", help="a webhook's stored deliveries, newest first")
    lst.add_argument("--webhook", required=True, metavar="ID", help="the webhook")
    lst.add_argument(
        "--disposition",
        choices=DISPOSITIONS,
        help="only routed, dropped, repeat, held or pending ones",
    )
    lst.add_argument(
        "--limit",
        type=bounded_int(1, events.LIMIT_MAX),
        metavar="N",
        help=f"at most N (default {events.LIMIT_DEFAULT}, at most {events.LIMIT_MAX})",
    )
    lst.add_argument("--cursor", metavar="C", help="the next page (a next_cursor printed before)")
    add_output_flags(lst)
    one = sub.add_parser(
        "show",
        help="one delivery: sanitized headers, payload, routing trace"
        " and its todos (never its raw body or a secret)",
    )
    one.add_argument("event_id", metavar="EVENT_ID")
    add_output_flags(one)
    configure_prune(sub)


async def run_events(args: argparse.Namespace, rt: Runtime) -> int:
    if args.action == "prune":
        return await run_prune(args, rt)
    if args.action == "list":
        doc = await events.list_events(
            rt,
            None,
            args.webhook,
            disposition=args.disposition,
            limit=args.limit,
            cursor=args.cursor,
        )
        show(args, doc, _render_events)
    else:
        show(args, await events.show_event(rt, None, args.event_id), _render_event)
    return 0


def configure_todos(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    lst = sub.add_parser(
        "list", help="todos of every endpoint, newest first, in every state unless --state"
    )
    lst.add_argument("--endpoint", metavar="ID", help="only this endpoint's")
    lst.add_argument("--queue", metavar="Q", help="only this queue's")
    lst.add_argument("--state", choices=todos.STATES, help="only todos in this state")
    lst.add_argument(
        "--limit",
        type=bounded_int(1, todos.LIMIT_MAX),
        metavar="N",
        help=f"at most N (default {todos.LIMIT_DEFAULT}, at most {todos.LIMIT_MAX})",
    )
    lst.add_argument(
        "--unreachable",
        action="store_true",
        help="only live todos in a queue their endpoint does not drain (no one"
        " can claim them), with the webhook that made them",
    )
    add_output_flags(lst)
    retry = sub.add_parser(
        "retry",
        help="put a dead todo back to pending, claimable at once with a fresh set of attempts",
    )
    retry.add_argument("todo_id", metavar="ID")


async def run_todos(args: argparse.Namespace, rt: Runtime) -> int:
    if args.action == "retry":
        emit(await todos.retry(rt, None, args.todo_id))
        return 0
    doc = await todos.list_all_todos(
        rt,
        endpoint_id=args.endpoint,
        queue=args.queue,
        state=args.state,
        limit=args.limit,
        unreachable=args.unreachable,
    )
    show(args, doc, _render_todos)
    return 0
