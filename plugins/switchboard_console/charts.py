"""Deliveries per hour over the last 24 h, stacked by outcome, drawn as SVG on the server."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

from markupsafe import Markup, escape

#: The outcomes a chart stacks, bottom first, with their fill colours.
OUTCOMES = (
    ("routed", "#2f7d4f"),
    ("default", "#3b6ea8"),
    ("dropped", "#9a9a9a"),
    ("faulted", "#c0392b"),
)
HOURS = 24


def outcome(event: dict[str, Any]) -> str:
    """One delivery's outcome: faulted (a rule faulted), dropped, default, or routed."""
    trace = event.get("routing_trace") or {}
    if trace.get("faults"):
        return "faulted"
    if event.get("disposition") == "dropped":
        return "dropped"
    if trace.get("stage") == "default":
        return "default"
    return "routed"


def buckets(events: Iterable[dict[str, Any]], now: dt.datetime) -> list[dict[str, int]]:
    """``HOURS`` hourly buckets, oldest first, each counting deliveries by outcome."""
    out = [{name: 0 for name, _ in OUTCOMES} for _ in range(HOURS)]
    for ev in events:
        when = dt.datetime.fromisoformat(str(ev["received_at"]))
        age = int((now - when).total_seconds() // 3600)
        if 0 <= age < HOURS:
            out[HOURS - 1 - age][outcome(ev)] += 1
    return out


def totals(hours: list[dict[str, int]]) -> dict[str, int]:
    return {name: sum(h[name] for h in hours) for name, _ in OUTCOMES}


def svg(hours: list[dict[str, int]], *, width: int, height: int, label: str) -> Markup:
    """A stacked bar chart; every number in it is ours, the label is escaped."""
    peak = max([sum(h.values()) for h in hours] + [1])
    bar = width / HOURS
    parts = [
        f'<svg class="chart" role="img" viewBox="0 0 {width} {height}" width="{width}"'
        f' height="{height}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(label)}</title>",
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#f6f6f6"/>',
    ]
    for i, hour in enumerate(hours):
        y = float(height)
        for name, colour in OUTCOMES:
            n = hour[name]
            if not n:
                continue
            h = n / peak * (height - 2)
            y -= h
            parts.append(
                f'<rect class="bar-{name}" x="{i * bar + 1:.1f}" y="{y:.1f}"'
                f' width="{max(bar - 2, 1):.1f}" height="{h:.1f}" fill="{colour}">'
                f"<title>{n} {name}, {HOURS - i} h ago</title></rect>"
            )
    parts.append("</svg>")
    return Markup("".join(parts))
