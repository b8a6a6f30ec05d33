"""The list tables at 80 and 132 columns: key columns shown, values truncated, never broken.

Each list's column plan (switchboard.cli.columns) is drawn with long, realistic rows on a
rich Console of each width; every row must be one line, every cell either its whole value
or a prefix of it ending in "…", and the key columns' headers all present.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from rich.console import Console
from switchboard_rules.history_cli import CHANGE_COLUMNS, _render_diff

from switchboard.cli.admin import endpoint_columns
from switchboard.cli.columns import Col, show_id, show_time
from switchboard.cli.read import (
    EVENT_COLUMNS,
    REFUSAL_COLUMNS,
    TODO_COLUMNS,
    WEBHOOK_COLUMNS,
    waited,
)
from switchboard.cli.render import cell, table

WHEN = "2026-12-03T12:30:05.123456Z"
VERBS = [f"verb_{n:02d}" for n in range(30)]


def _id() -> str:
    return str(uuid.uuid4())


def _events() -> list[dict[str, Any]]:
    return [
        {
            "event_id": _id(),
            "received_at": WHEN,
            "source": "github",
            "kind": kind,
            "verified": True,
            "disposition": disposition,
            "routing_trace": {"stage": stage, "cause": cause, "rule_id": rule},
            **({"waiting_s": 125.4} if disposition == "pending" else {}),
        }
        for kind, disposition, stage, cause, rule in (
            ("pull_request.synchronize", "routed", "rule", "rule_matched", "label-bug-triage"),
            ("ping", "dropped", "rule", "rule_matched", "ping"),
            ("issues.opened", "pending", "default", "no_match_default", None),
        )
    ]


def _todos() -> list[dict[str, Any]]:
    return [
        {
            "todo_id": _id(),
            "endpoint_name": name,
            "endpoint_id": _id(),
            "queue": queue,
            "state": state,
            "attempts": 2,
            "title": title,
            "created_at": WHEN,
        }
        for name, queue, state, title in (
            ("router-main", "handoff", "pending", "Fix the flaky integration test in payments"),
            ("pool", "inbox", "claimed", "disk full on host-7"),
        )
    ]


def _webhooks() -> list[dict[str, Any]]:
    return [
        {
            "webhook_id": _id(),
            "owner_name": "alice",
            "endpoint_name": "router-main",
            "endpoint_id": _id(),
            "source_type": source,
            "target_queue": "incidents",
            "trust_mode": "signed",
            "rule_count": 12,
            "created_at": WHEN,
        }
        for source in ("github", "standardwebhooks")
    ]


def _endpoints() -> list[dict[str, Any]]:
    return [
        {
            "endpoint_id": _id(),
            "name": name,
            "owner_name": "alice",
            "scope_queues": ["inbox", "handoff", "alerts"],
            "verbs": verbs,
            "webhook_queues": ["inbox"],
            "webhook_source_types": ["github", "generic"],
            "webhook_max": 4,
            "state": "active",
            "expires_at": None,
            "created_at": WHEN,
        }
        for name, verbs in (("router-main", VERBS), ("narrow", ["list_webhooks", "claim_next"]))
    ]


def _changes() -> list[dict[str, Any]]:
    saved = {"queue": "inbox", "endpoints": [_id()], "stage": "rule", "rule_id": "catch-all"}
    candidate = {"stage": "default", "cause": "no_match_default", "queue": "handoff"}
    return [
        {"event_id": _id(), "received_at": WHEN, "kind": "issues.labeled", **sides}
        for sides in ({"saved": saved, "candidate": candidate},) * 2
    ]


def _refusals() -> list[dict[str, Any]]:
    return [
        {
            "received_at": WHEN,
            "reason": reason,
            "detail": detail,
            "delivery_id": _id(),
            "source_ip": "203.0.113.250",
            "size": 5120,
            "headers": {},
        }
        for reason, detail in (
            ("stale_timestamp", "stale signature timestamp (4000 s old, tolerance 300 s)"),
            ("missing_header", "missing X-Hub-Signature-256 header"),
        )
    ]


#: (list, plan, rows, its key columns' headers)
LISTS: list[tuple[str, Sequence[Col], Callable[[], list[dict[str, Any]]], list[str]]] = [
    (
        "events list",
        EVENT_COLUMNS,
        _events,
        ["EVENT", "RECEIVED", "KIND", "DISPOSITION", "STAGE", "RULE"],
    ),
    ("todos list", TODO_COLUMNS, _todos, ["TODO", "ENDPOINT", "QUEUE", "STATE", "TITLE"]),
    (
        "webhook list",
        WEBHOOK_COLUMNS,
        _webhooks,
        ["WEBHOOK", "OWNER", "ENDPOINT", "SOURCE", "QUEUE", "RULES"],
    ),
    (
        "endpoint list",
        endpoint_columns(VERBS),
        _endpoints,
        ["ID", "OWNER", "NAME", "STATE", "QUEUES", "VERBS"],
    ),
    ("webhook refusals", REFUSAL_COLUMNS, _refusals, ["RECEIVED", "REASON", "DETAIL", "DELIVERY"]),
    (
        "rules diff --table",
        CHANGE_COLUMNS,
        _changes,
        ["EVENT", "RECEIVED", "KIND", "SAVED", "CANDIDATE"],
    ),
]


def _draw(width: int, renderable: Any) -> str:
    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None, highlight=False, soft_wrap=False).print(
        renderable
    )
    return buf.getvalue()


def _body(text: str) -> list[list[str]]:
    """The cells of each body row (the lines between the header rule and the bottom)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("┡")) + 1
    end = next(i for i, line in enumerate(lines) if line.startswith("└"))
    return [[c.strip() for c in line.split("│")[1:-1]] for line in lines[start:end]]


def _headers(text: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith("┃"))
    return [h.strip() for h in line.split("┃")[1:-1]]


@pytest.mark.parametrize("width", [80, 132])
@pytest.mark.parametrize(("name", "plan", "make", "keys"), LISTS, ids=[n for n, *_ in LISTS])
def test_a_list_fits_with_its_key_columns_truncated_never_broken(
    width: int, name: str, plan: Sequence[Col], make: Callable[[], Any], keys: list[str]
) -> None:
    rows = make()
    text = _draw(width, table(name, plan, rows))
    assert all(len(line) <= width for line in text.splitlines()), text
    headers = _headers(text)
    assert headers[: len(keys)] == keys, text  # the key columns, whole, in their order
    assert 4 <= len(keys) <= 6
    body = _body(text)
    assert len(body) == len(rows), text  # one line per row: nothing wrapped
    shown = [c for c in plan if c.header in headers]
    for row, cells in zip(rows, body, strict=True):
        for col, got in zip(shown, cells, strict=True):
            value = col.get(row)
            if col.kind == "id":
                value = show_id(value, compact=False)
            elif col.kind == "time":
                value = show_time(value, compact="12-03" in got and "2026" not in got)
            whole = cell(value).plain
            if got.endswith("…") and got != whole:
                assert whole.startswith(got[:-1]), (col.header, got, whole)
            else:
                assert got == whole, (col.header, got, whole)


def test_low_value_columns_drop_in_their_stated_order() -> None:
    rows = _events()
    seen = {w: _headers(_draw(w, table("e", EVENT_COLUMNS, rows))) for w in (80, 100, 110, 132)}
    assert "CAUSE" not in seen[80] and "SOURCE" not in seen[80] and "VERIFIED" not in seen[80]
    assert "WAITING" not in seen[80] and "WAITING" in seen[100]
    assert "CAUSE" in seen[100] and "SOURCE" not in seen[100]
    assert {"CAUSE", "SOURCE"} <= set(seen[110]) and "VERIFIED" not in seen[110]
    assert {"WAITING", "CAUSE", "SOURCE", "VERIFIED"} <= set(seen[132])
    text = _draw(80, table("e", EVENT_COLUMNS, rows))
    assert (
        "(--json has all: ids and times shortened; hidden: WAITING, CAUSE, SOURCE, VERIFIED)"
        in " ".join(text.split())  # the note wraps at 80 columns
    )


def test_a_pending_events_wait_is_short_and_the_others_blank() -> None:
    assert [waited(s) for s in (None, 0, 45.9, 60, 725, 3600, 11_000, 86_400 * 2 + 3600 * 4)] == [
        "", "0s", "45s", "1m00s", "12m05s", "1h00m", "3h03m", "2d04h"
    ]  # fmt: skip
    text = _draw(132, table("e", EVENT_COLUMNS, _events()))
    [pending] = [line for line in text.splitlines() if "issues.opened" in line]
    assert "2m05s" in pending


def test_ids_are_a_prefix_when_narrow_and_whole_when_they_fit() -> None:
    rows = _webhooks()
    narrow, wide = (_draw(w, table("w", WEBHOOK_COLUMNS, rows)) for w in (80, 220))
    full = rows[0]["webhook_id"]
    assert full not in narrow and full[:8] + "…" in narrow
    assert full in wide and "2026-12-03 12:30:05Z" in wide
    assert "--json has all" not in wide


def test_the_diff_renders_its_totals_and_changes_at_80_columns() -> None:
    doc = {
        "evaluated": 300,
        "changed": 2,
        "totals": {
            side: {"queues": {"inbox": 298}, "drop": 2, "default": 0, "faults": {}}
            for side in ("saved", "candidate")
        },
        "changes": _changes(),
    }
    buf = io.StringIO()
    _render_diff(Console(file=buf, width=80, color_system=None, soft_wrap=False), doc)
    text = buf.getvalue()
    assert all(len(line) <= 80 for line in text.splitlines())
    for header in ("OUTCOME", "SAVED", "CANDIDATE", "EVENT", "RECEIVED", "KIND"):
        assert header in text, header
    assert "queue inbox" in text and "298" in text
