"""``switchboard events prune``: the plan of a retention cut, then the cut itself."""

from __future__ import annotations

import argparse
import datetime as dt
from typing import TYPE_CHECKING, Any

from ..runtime import Runtime
from ..service import retention
from .render import add_output_flags, show, table

if TYPE_CHECKING:
    from rich.console import Console


def parse_before(text: str) -> dt.datetime:
    """An argparse ``type``: an ISO date (midnight UTC) or time (UTC unless it says)."""
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"a date or time, as 2026-01-31 or 2026-01-31T12:00:00+00:00 (got {text!r})"
        ) from None
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


def configure_prune(sub: Any) -> None:
    p = sub.add_parser(
        "prune",
        help="delete events received before a date, in batches (todos keep their snapshot,"
        " once claims stay, pending events wait for their decision)",
    )
    p.add_argument(
        "--before", required=True, type=parse_before, metavar="DATE", help="ISO date or time"
    )
    p.add_argument("--webhook", metavar="ID", help="only this webhook's (a deleted one's too)")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument(
        "--plan", action="store_true", help="print how many would go per webhook, delete none"
    )
    mode.add_argument("--apply", action="store_true", help="delete them and print the count")
    add_output_flags(p)


PLAN_COLUMNS = [
    ("WEBHOOK", lambda r: r["webhook_id"] or "(deleted webhooks)"),
    ("EVENTS", lambda r: r["events"]),
    ("OLDEST", lambda r: r["oldest"]),
    ("NEWEST", lambda r: r["newest"]),
]
APPLY_COLUMNS = [
    ("WEBHOOK", lambda r: r["webhook_id"] or "(deleted webhooks)"),
    ("DELETED", lambda r: r["deleted"]),
]


def _render_plan(out: Console, doc: dict[str, Any]) -> None:
    title = f"events received before {doc['before']}: {doc['events']} would be deleted"
    out.print(table(title, PLAN_COLUMNS, doc["webhooks"]))


def _render_apply(out: Console, doc: dict[str, Any]) -> None:
    title = f"events received before {doc['before']}: {doc['deleted']} deleted"
    out.print(table(title, APPLY_COLUMNS, doc["webhooks"]))


async def run_prune(args: argparse.Namespace, rt: Runtime) -> int:
    cutoffs = await retention.cutoffs_before(rt, args.before, args.webhook)
    before = {"before": args.before.isoformat()}
    if args.plan:
        show(args, {**before, **await retention.plan(rt, cutoffs)}, _render_plan)
    else:
        done = await retention.prune(rt, cutoffs)
        done.pop("cut_short", None)  # waits for the lock: never cut short here
        show(args, {**before, **done}, _render_apply)
    return 0
