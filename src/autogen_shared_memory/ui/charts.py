"""The overview's charts, drawn on the server as inline SVG (no script, no style attribute: the page's
Content-Security-Policy allows neither). Every label is escaped; colours come from the stylesheet by class.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence

from markupsafe import Markup, escape

from ..core.types import ScopeRef

WIDTH, HEIGHT = 640, 220
LEFT, RIGHT, TOP, BOTTOM = 48, 170, 12, 28
MAX_SERIES = 8  # the scopes with the most facts get a line each
MAX_BARS = 12
POINTS = 60  # samples per line


def _day(ts: float, span: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M" + (":%S" if span < 3600 else ""), time.localtime(ts))


def facts_over_time(created: Mapping[ScopeRef, Sequence[float]]) -> Markup:
    """A line per scope (the ``MAX_SERIES`` largest): how many facts it had been given at each time.

    Args:
        created: each scope's fact creation times, sorted.

    Returns:
        The ``<svg>`` element, or a short note when no scope has a fact.
    """
    series = sorted(((ref, times) for ref, times in created.items() if times), key=lambda s: -len(s[1]))
    series = series[:MAX_SERIES]
    if not series:
        return Markup('<p class="muted">No facts yet.</p>')
    start = min(t[0] for _, t in series)
    end = max(t[-1] for _, t in series)
    span = max(end - start, 1.0)
    top = max(len(t) for _, t in series)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="facts over time per scope">',
        f'<line class="axis" x1="{LEFT}" y1="{TOP + plot_h}" x2="{LEFT + plot_w}" y2="{TOP + plot_h}"/>',
        f'<line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + plot_h}"/>',
        f'<text class="label" x="{LEFT - 6}" y="{TOP + 10}" text-anchor="end">{top}</text>',
        f'<text class="label" x="{LEFT - 6}" y="{TOP + plot_h}" text-anchor="end">0</text>',
        f'<text class="label" x="{LEFT}" y="{HEIGHT - 8}">{escape(_day(start, span))}</text>',
        f'<text class="label" x="{LEFT + plot_w}" y="{HEIGHT - 8}" text-anchor="end">{escape(_day(end, span))}</text>',
    ]
    for n, (ref, times) in enumerate(series):
        points = []
        j = 0
        for step in range(POINTS + 1):
            at = start + span * step / POINTS
            while j < len(times) and times[j] <= at:
                j += 1
            x = LEFT + plot_w * step / POINTS
            y = TOP + plot_h * (1 - j / top)
            points.append(f"{x:.1f},{y:.1f}")
        parts.append(f'<polyline class="series s{n}" points="{" ".join(points)}"/>')
        y = TOP + 12 + n * 16
        parts.append(f'<rect class="swatch s{n}" x="{WIDTH - RIGHT + 10}" y="{y - 9}" width="10" height="10"/>')
        label = escape(_cut(str(ref), 20))
        parts.append(f'<text class="label" x="{WIDTH - RIGHT + 24}" y="{y}">{label} ({len(times)})</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def writes_per_agent(writes: Counter[str]) -> Markup:
    """A bar per writer (the ``MAX_BARS`` busiest): the facts it created or restated, every scope together.

    Args:
        writes: facts created or restated per actor.

    Returns:
        The ``<svg>`` element, or a short note when nothing was written.
    """
    bars = writes.most_common(MAX_BARS)
    if not bars:
        return Markup('<p class="muted">No writes yet.</p>')
    top = bars[0][1]
    row, label_w = 20, 150
    height = TOP + row * len(bars) + 8
    plot_w = WIDTH - label_w - 60
    parts = [f'<svg class="chart" viewBox="0 0 {WIDTH} {height}" role="img" aria-label="writes per agent">']
    for n, (actor, count) in enumerate(bars):
        y = TOP + n * row
        w = max(plot_w * count / top, 1.0)
        parts.append(
            f'<text class="label" x="{label_w - 6}" y="{y + 13}" text-anchor="end">{escape(_cut(actor, 22))}</text>'
        )
        parts.append(f'<rect class="bar" x="{label_w}" y="{y + 2}" width="{w:.1f}" height="{row - 6}"/>')
        parts.append(f'<text class="label" x="{label_w + w + 4:.1f}" y="{y + 13}">{count}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def _cut(text: str, limit: int) -> str:
    """A label on one line, at most ``limit`` characters, without control or format characters."""
    clean = "".join(ch if ch.isprintable() else "\ufffd" for ch in text)
    return clean if len(clean) <= limit else clean[: limit - 1] + "…"
