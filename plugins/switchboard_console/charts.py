"""Deliveries per hour, stacked by outcome, drawn as SVG on the server with a time axis and
a scale; the counts come from one aggregate query (``service.overview.hourly``)."""

from __future__ import annotations

import math
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
#: Room for the scale's numbers (left) and the time axis's labels (bottom).
LEFT, BOTTOM, TOP = 30, 14, 6


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


def totals(hours: list[dict[str, int]]) -> dict[str, int]:
    return {name: sum(h[name] for h in hours) for name, _ in OUTCOMES}


def nice_ceiling(n: int) -> int:
    """The scale's top: the least of 1, 2, 5 × 10^k at or above ``n`` (at least 1)."""
    if n <= 1:
        return 1
    power = 10 ** int(math.floor(math.log10(n)))
    for step in (1, 2, 5, 10):
        if step * power >= n:
            return step * power
    return 10 * power  # pragma: no cover - the loop always returns


def svg(hours: list[dict[str, int]], *, width: int, height: int, label: str) -> Markup:
    """A stacked bar chart with a scale (0, half, top) and a time axis (hours ago, every
    6 h); every number in it is ours, the label is escaped."""
    count = len(hours)
    top = nice_ceiling(max([sum(h.values()) for h in hours] + [0]))
    plot_w, plot_h = width - LEFT, height - BOTTOM - TOP
    base = TOP + plot_h
    bar = plot_w / count
    parts = [
        f'<svg class="chart" role="img" viewBox="0 0 {width} {height}" width="{width}"'
        f' height="{height}" xmlns="http://www.w3.org/2000/svg" data-scale-max="{top}">',
        f"<title>{escape(label)}</title>",
        f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="#f6f6f6"/>',
    ]
    # a middle tick only where it is a whole number of deliveries
    for value in (0, top // 2, top) if top % 2 == 0 else (0, top):
        y = base - value / top * plot_h
        parts.append(
            f'<line class="grid" x1="{LEFT}" x2="{width}" y1="{y:.1f}" y2="{y:.1f}"'
            ' stroke="#ddd"/>'
            f'<text class="tick-y" x="{LEFT - 3}" y="{y + 3:.1f}" text-anchor="end"'
            f' font-size="9">{value}</text>'
        )
    for i, hour in enumerate(hours):
        y = float(base)
        ago = count - i
        for name, colour in OUTCOMES:
            n = hour[name]
            if not n:
                continue
            h = n / top * plot_h
            y -= h
            parts.append(
                f'<rect class="bar-{name}" data-hours-ago="{ago}" data-n="{n}"'
                f' x="{LEFT + i * bar + 1:.1f}" y="{y:.1f}" width="{max(bar - 2, 1):.1f}"'
                f' height="{h:.1f}" fill="{colour}"><title>{n} {name}, {ago - 1}–{ago} h ago'
                "</title></rect>"
            )
    parts.append(
        f'<line class="axis-x" x1="{LEFT}" x2="{width}" y1="{base}" y2="{base}" stroke="#555"/>'
        f'<line class="axis-y" x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{base}" stroke="#555"/>'
    )
    for i in range(0, count + 1, 6):
        x = LEFT + i * bar
        text = "now" if i == count else f"−{count - i} h"
        anchor = "end" if i == count else "start" if i == 0 else "middle"
        parts.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{base}" y2="{base + 3}" stroke="#555"/>'
            f'<text class="tick-x" x="{x:.1f}" y="{height - 2}" text-anchor="{anchor}"'
            f' font-size="9">{text}</text>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))
