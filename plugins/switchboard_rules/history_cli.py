"""``switchboard rules diff|explain|lint``: the history verbs, as the operator, over the database.

On a terminal ``diff`` and ``lint`` show a progress bar (rate, ETA) on stderr and end with a
summary table; piped (or ``--json``) they print the JSON the MCP tools answer. Ctrl-C stops
the evaluation (the sandbox's evaluators are killed with it).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from switchboard.cli.columns import Col
from switchboard.cli.render import add_output_flags, wants_table
from switchboard.plugin import InvalidArgument, read_json

if TYPE_CHECKING:
    from rich.console import Console

    # These verbs run the host's history service, which takes the host's runtime (what
    # the CLI hands a command), not only the contract's view of it.
    from switchboard.runtime import Runtime

VERBS = ("diff", "explain", "lint")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer (got {text!r})")
    return value


def configure(sub: Any) -> None:
    """Add ``diff``, ``explain`` and ``lint`` to the ``rules`` sub-command parser."""
    diff = sub.add_parser("diff", help="a candidate config vs the saved one over stored events")
    diff.add_argument("webhook_id", metavar="WEBHOOK_ID")
    diff.add_argument(
        "candidate",
        metavar="CANDIDATE.json",
        help="the candidate routing config: {rules?, default_action?, params?, on_fault?,"
        " lanes?} (a key left out is the saved one, as `webhook rules set` keeps it)",
    )
    window = diff.add_mutually_exclusive_group()
    window.add_argument(
        "--last", type=_positive, metavar="N", help="the newest N stored events (default 1000)"
    )
    window.add_argument(
        "--since",
        metavar="DURATION",
        help="the events since a duration ago (30m, 24h, 7d) or a timestamp",
    )
    window.add_argument("--cursor", metavar="CURSOR", help="go on from a previous run's cursor")
    add_output_flags(diff)
    explain = sub.add_parser("explain", help="every rule's verdict on one stored event")
    explain.add_argument("event_id", metavar="EVENT_ID")
    add_output_flags(explain)
    lint = sub.add_parser("lint", help="rules that never match, only fault, or are shadowed")
    lint.add_argument("webhook_id", metavar="WEBHOOK_ID")
    lint.add_argument(
        "--last", type=_positive, metavar="N", help="the newest N stored events (default 1000)"
    )
    add_output_flags(lint)


@contextlib.asynccontextmanager
async def _progress(
    show: bool, what: str
) -> AsyncIterator[Callable[[int, int | None, str | None], Awaitable[None]] | None]:
    """A rich progress bar on stderr (events, rate, ETA), when stderr is a terminal."""
    if not show or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    class _Rate(TextColumn):
        def render(self, task: Any) -> Any:
            from rich.text import Text

            speed = task.finished_speed or task.speed
            return Text(f"{speed:,.0f} events/s" if speed else "- events/s")

    bar = Progress(
        TextColumn(what),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        _Rate(""),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=Console(file=sys.stderr),
        transient=False,
    )
    task = bar.add_task(what, total=None)

    async def report(done: int, total: int | None, _message: str | None) -> None:
        bar.update(task, completed=done, total=total)

    with bar:
        yield report


async def run(args: argparse.Namespace, rt: Runtime) -> int:
    from switchboard.service import history

    await rt.open_store(create=False)
    table = wants_table(args)
    if args.action == "explain":
        doc = await history.explain_stored(rt, None, args.event_id)
        _show(table, doc, _render_explain)
        return 0
    if args.action == "lint":
        async with _progress(table, "lint") as report:
            doc = await history.lint_rules(
                rt, None, args.webhook_id, last=args.last, progress=report
            )
        _show(table, doc, _render_lint)
        return 0
    candidate = _read(args.candidate)
    body: dict[str, Any] = {
        "rules": candidate.get("rules"),
        "default_action": candidate.get("default_action"),
        "params": candidate.get("params"),
        "on_fault": candidate.get("on_fault"),
        "lanes": candidate.get("lanes"),
    }
    async with _progress(table, "diff") as report:
        # One call evaluates the whole window (totals and the changed count); the changed
        # events beyond its first page are listed page by page.
        doc = await history.diff_rules(
            rt,
            None,
            args.webhook_id,
            **body,
            last=None if args.cursor else args.last,
            since=None if args.cursor else args.since,
            cursor=args.cursor,
            progress=report,
        )
        changes = list(doc["changes"])
        more = doc.pop("changes_cursor", None)
        while more is not None:
            page = await history.diff_rules(rt, None, args.webhook_id, **body, changes_cursor=more)
            changes.extend(page["changes"])
            more = page.get("changes_cursor")
    doc["changes"] = changes
    _show(table, doc, _render_diff)
    return 0


def refuse_unknown_keys(doc: dict[str, Any], known: Sequence[str], what: str) -> None:
    """Refuse a JSON file's keys outside ``known``, naming them: a misspelt key must not be
    dropped without a word (the MCP tools refuse unknown arguments the same way)."""
    unknown = sorted(k for k in doc if k not in known)
    if unknown:
        noun = "key" if len(unknown) == 1 else "keys"
        raise InvalidArgument(
            f"{what}: unknown {noun} {', '.join(map(repr, unknown))}"
            f" (known: {', '.join(sorted(known))})"
        )


def _read(path: str) -> dict[str, Any]:
    doc = read_json(path, "CANDIDATE")
    if not isinstance(doc, dict):
        raise InvalidArgument(
            "CANDIDATE: must be an object {rules, default_action?, params?, on_fault?, lanes?}"
        )
    refuse_unknown_keys(
        doc, ("rules", "default_action", "params", "on_fault", "lanes"), "CANDIDATE"
    )
    if "rules" not in doc and "on_fault" not in doc and "lanes" not in doc:
        doc["rules"] = []  # a policy-only candidate keeps the saved rules
    return doc


def _show(table: bool, doc: dict[str, Any], render: Callable[[Console, Any], None]) -> None:
    from switchboard.cli import render as out

    if table:
        render(out.console(), doc)
    else:
        out.emit(doc)


def _where(decision: dict[str, Any]) -> str:
    if decision.get("drop"):
        return "drop"
    return f"{decision.get('queue')} → {len(decision.get('endpoints') or [])} endpoint(s)"


def _by(decision: dict[str, Any]) -> str:
    """What decided: ``default (cause)``, the deciding rule's id, or the deciding stage's
    name (``llm (stored)``: its stored verdict, not re-asked)."""
    if decision.get("stage") == "default":
        return f"default ({decision.get('cause')})"
    if decision.get("stage") == "rule" and decision.get("rule_id"):
        return str(decision["rule_id"])
    by = str(decision.get("decided_by") or decision.get("stage"))
    return f"{by} (stored)" if decision.get("replay") == "stored" else by


def _totals_rows(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    saved, cand = doc["totals"]["saved"], doc["totals"]["candidate"]
    for queue in sorted(set(saved["queues"]) | set(cand["queues"])):
        yield {
            "outcome": f"queue {queue}",
            "saved": saved["queues"].get(queue, 0),
            "candidate": cand["queues"].get(queue, 0),
        }
    for key in ("drop", "default"):
        yield {"outcome": key, "saved": saved[key], "candidate": cand[key]}
    for key, label in (("stages", "by stage"), ("stored", "stored, not re-asked")):
        mine, theirs = saved.get(key) or {}, cand.get(key) or {}
        for name in sorted(set(mine) | set(theirs)):
            if key == "stages" and name == "default":
                continue  # the default row above
            yield {
                "outcome": f"{label} {name}",
                "saved": mine.get(name, 0),
                "candidate": theirs.get(name, 0),
            }
    for cause in sorted(set(saved["faults"]) | set(cand["faults"])):
        yield {
            "outcome": f"fault {cause}",
            "saved": saved["faults"].get(cause, 0),
            "candidate": cand["faults"].get(cause, 0),
        }


def _decided(decision: dict[str, Any]) -> str:
    """A decision in a table cell, shortest first: ``inbox ×2 by rule-id`` or ``drop by …``."""
    if decision.get("drop"):
        return f"drop by {_by(decision)}"
    return f"{decision.get('queue')} ×{len(decision.get('endpoints') or [])} by {_by(decision)}"


#: The changed events' column plan (switchboard.cli.columns): all five are key columns,
#: truncated with "…" at 80 columns; the id and time shorten when the table would not fit.
CHANGE_COLUMNS = [
    Col("EVENT", lambda x: x["event_id"], kind="id"),
    Col("RECEIVED", lambda x: x["received_at"], kind="time"),
    Col("KIND", lambda x: x.get("kind"), min_width=8),
    Col("SAVED", lambda x: _decided(x["saved"]), min_width=14),
    Col("CANDIDATE", lambda x: _decided(x["candidate"]), min_width=14),
]


def _render_diff(out: Console, doc: dict[str, Any]) -> None:
    from switchboard.cli import render as r

    out.print(r.heading(f"{doc['evaluated']} events evaluated, {doc['changed']} change decision"))
    out.print(
        r.table(
            "totals",
            [
                Col("OUTCOME", lambda x: x["outcome"], min_width=12),
                Col("SAVED", lambda x: x["saved"], justify="right"),
                Col("CANDIDATE", lambda x: x["candidate"], justify="right"),
            ],
            _totals_rows(doc),
        )
    )
    if doc["changes"]:
        out.print(
            r.table(
                "changed events",
                CHANGE_COLUMNS,
                doc["changes"],
            )
        )
    if doc.get("next_cursor"):
        out.print(
            r.cell(f"stopped ({doc.get('stopped')}): go on with --cursor {doc['next_cursor']}")
        )


def _render_explain(out: Console, doc: dict[str, Any]) -> None:
    from switchboard.cli import render as r

    decision = doc["decision"]
    out.print(r.heading(f"event {doc.get('event_id')}: {_where(decision)} by {_by(decision)}"))
    if doc.get("stages"):
        out.print(
            r.table(
                "stages",
                [
                    ("STAGE", lambda x: x["stage"]),
                    (
                        "SAID",
                        lambda x: x["said"] + (" (stored)" if x.get("replay") == "stored" else ""),
                    ),
                    ("FAULT", lambda x: (x.get("fault") or {}).get("detail")),
                ],
                doc["stages"],
            )
        )
    out.print(
        r.table(
            None,
            [
                ("#", lambda x: x["index"]),
                ("RULE", lambda x: x["id"]),
                (
                    "VERDICT",
                    lambda x: (
                        x["verdict"]
                        + (f" (would: {x['would']})" if x.get("would") else "")
                        + (f" ({x['decided_by']} decided)" if x.get("decided_by") else "")
                    ),
                ),
                ("ERROR", lambda x: x.get("error")),
            ],
            doc["verdicts"],
        )
    )


def _render_lint(out: Console, doc: dict[str, Any]) -> None:
    from switchboard.cli import render as r

    out.print(r.heading(f"{doc['evaluated']} events evaluated, {len(doc['findings'])} finding(s)"))
    out.print(
        r.table(
            None,
            [
                ("KIND", lambda x: x["kind"]),
                ("RULE", lambda x: x.get("rule_id") or x.get("param")),
                ("DETAIL", lambda x: x["detail"]),
            ],
            doc["findings"],
        )
    )
