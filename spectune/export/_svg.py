"""Small inline-SVG charts (lines and scatter with axes, ticks and a legend), no dependencies.

The report must open offline and self-contained, so the charts are drawn here as SVG text.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from html import escape

__all__ = ["Band", "Series", "chart_svg", "nice_ticks"]

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22")
_WIDTH, _HEIGHT = 460, 300
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 16, 30, 44
_LEGEND_ROW = 15


@dataclass(frozen=True)
class Series:
    """One named set of (x, y) points; ``lines`` joins them in x order; ``emphasis`` draws rings;
    ``errors`` (per point, in y units) draws error bars y +- error."""

    name: str
    points: Sequence[tuple[float, float]]
    color: str
    lines: bool = True
    hollow: Sequence[bool] = field(default_factory=tuple)  # per point: drawn hollow (e.g. infeasible)
    emphasis: Sequence[tuple[float, float]] = field(default_factory=tuple)
    errors: Sequence[float] = field(default_factory=tuple)


@dataclass(frozen=True)
class Band:
    """A shaded x range across the plot (e.g. a tie set of K), labelled at its top."""

    low: float
    high: float
    color: str
    label: str


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering [low, high] (steps of 1, 2 or 5 times a power of ten)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return []
    if high <= low:
        high = low + (abs(low) or 1.0)
    raw = (high - low) / max(count, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    first = math.floor(low / step) * step
    ticks = []
    value = first
    while value <= high + step * 1e-9:
        ticks.append(round(value, 10))
        value += step
    if ticks[-1] < high:
        ticks.append(round(value, 10))
    return ticks


def _label(value: float) -> str:
    if abs(value) >= 10000:
        return f"{value / 1000:g}k"
    return f"{value:g}"


def chart_svg(
    series: Sequence[Series],
    *,
    title: str,
    x_label: str,
    y_label: str,
    integer_x: bool = False,
    y_from_zero: bool = True,
    hline: tuple[float, str] | None = None,
    band: Band | None = None,
) -> str:
    """An SVG chart of ``series``; ``hline`` = (y, label) draws a dashed limit (an SLO); ``band`` shades an x range."""
    xs = [x for s in series for x, _ in s.points]
    ys = [y for s in series for _, y in s.points if math.isfinite(y)] + ([hline[0]] if hline else [])
    ys += [y + e for s in series for (_, y), e in zip(s.points, s.errors) if math.isfinite(y + e)]
    if not xs or not ys:
        return f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="60"><text x="10" y="30">{escape(title)}: no data</text></svg>'
    x_ticks = (
        list(range(int(min(xs)), int(max(xs)) + 1))
        if integer_x and max(xs) - min(xs) <= 16
        else nice_ticks(min(xs), max(xs))
    )
    y_ticks = nice_ticks(0.0 if y_from_zero else min(ys), max(ys))
    x0, x1, y0, y1 = x_ticks[0], x_ticks[-1], y_ticks[0], y_ticks[-1]
    plot_w, plot_h = _WIDTH - _LEFT - _RIGHT, _HEIGHT - _TOP - _BOTTOM

    def px(x: float) -> float:
        return _LEFT + (x - x0) / ((x1 - x0) or 1.0) * plot_w

    def py(y: float) -> float:
        return _TOP + plot_h - (y - y0) / ((y1 - y0) or 1.0) * plot_h

    height = _HEIGHT + _LEGEND_ROW * len(series)  # the legend sits under the plot, never over a point
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" viewBox="0 0 {_WIDTH} {height}" '
        'font-family="sans-serif" font-size="11">',
        f'<text x="{_WIDTH / 2}" y="16" text-anchor="middle" font-size="13" font-weight="bold">{escape(title)}</text>',
        f'<rect x="{_LEFT}" y="{_TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>',
    ]
    if band is not None:
        out.extend(_band_svg(band, px, _TOP, plot_h, step=1.0 if integer_x else 0.0))
    for tick in x_ticks:
        out.append(
            f'<line x1="{px(tick):.1f}" y1="{_TOP + plot_h}" x2="{px(tick):.1f}" y2="{_TOP + plot_h + 4}" stroke="#999"/>'
        )
        out.append(f'<text x="{px(tick):.1f}" y="{_TOP + plot_h + 16}" text-anchor="middle">{_label(tick)}</text>')
    for tick in y_ticks:
        out.append(f'<line x1="{_LEFT}" y1="{py(tick):.1f}" x2="{_LEFT + plot_w}" y2="{py(tick):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{_LEFT - 6}" y="{py(tick) + 4:.1f}" text-anchor="end">{_label(tick)}</text>')
    out.append(f'<text x="{_LEFT + plot_w / 2}" y="{_HEIGHT - 8}" text-anchor="middle">{escape(x_label)}</text>')
    out.append(
        f'<text x="14" y="{_TOP + plot_h / 2}" text-anchor="middle" transform="rotate(-90 14 {_TOP + plot_h / 2})">{escape(y_label)}</text>'
    )
    if hline is not None:
        out.append(
            f'<line x1="{_LEFT}" y1="{py(hline[0]):.1f}" x2="{_LEFT + plot_w}" y2="{py(hline[0]):.1f}" stroke="#d62728" stroke-dasharray="5,4"/>'
            f'<text x="{_LEFT + plot_w - 4}" y="{py(hline[0]) - 4:.1f}" text-anchor="end" fill="#d62728">{escape(hline[1])}</text>'
        )
    for s in series:
        out.extend(_series_svg(s, px, py))
    out.extend(_legend(series))
    out.append("</svg>")
    return "\n".join(out)


def _series_svg(s: Series, px: Callable[[float], float], py: Callable[[float], float]) -> list[str]:
    parts = []
    finite = [
        (x, y, s.hollow[i] if i < len(s.hollow) else False) for i, (x, y) in enumerate(s.points) if math.isfinite(y)
    ]
    if s.lines and len(finite) > 1:
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y, _ in sorted(finite))
        parts.append(f'<polyline points="{path}" fill="none" stroke="{s.color}" stroke-width="1.5"/>')
    for (x, y), error in zip(s.points, s.errors):
        if error > 0 and math.isfinite(y):
            low, high = py(y - error), py(y + error)
            parts.append(
                f'<path d="M{px(x):.1f},{low:.1f}V{high:.1f}M{px(x) - 3:.1f},{low:.1f}h6M{px(x) - 3:.1f},{high:.1f}h6" '
                f'stroke="{s.color}" stroke-width="1" fill="none"/>'
            )
    for x, y, hollow in finite:
        fill = "white" if hollow else s.color
        parts.append(
            f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{fill}" stroke="{s.color}"><title>{escape(s.name)}: ({x:g}, {y:.4g})</title></circle>'
        )
    for x, y in s.emphasis:
        parts.append(
            f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="7" fill="none" stroke="{s.color}" stroke-width="2"/>'
        )
    return parts


def _band_svg(band: Band, px: Callable[[float], float], top: float, height: float, *, step: float) -> list[str]:
    """The band widened by half a step each side, so a band of one integer x is visible."""
    left, right = px(band.low - step / 2), px(band.high + step / 2)
    return [
        f'<rect x="{left:.1f}" y="{top}" width="{right - left:.1f}" height="{height}" fill="{band.color}" fill-opacity="0.12">'
        f"<title>{escape(band.label)}</title></rect>",
        f'<text x="{(left + right) / 2:.1f}" y="{top + 12}" text-anchor="middle" fill="{band.color}">{escape(band.label)}</text>',
    ]


def _legend(series: Sequence[Series]) -> list[str]:
    parts = []
    for i, s in enumerate(series):
        y = _HEIGHT + 4 + _LEGEND_ROW * i
        parts.append(f'<rect x="{_LEFT + 8}" y="{y - 8}" width="10" height="10" fill="{s.color}"/>')
        parts.append(f'<text x="{_LEFT + 22}" y="{y + 1}">{escape(s.name)}</text>')
    return parts
