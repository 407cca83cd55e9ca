"""Plots for the HTML report, drawn as inline SVG: no JavaScript, no external asset, readable
in a mail client, a browser and a PDF. Pure: series in, SVG text out; every text drawn is
escaped here (the report's values come from hosts).

A plot has dated x ticks (UTC), a y axis from zero (a drop looks its size), the baseline as a
dashed line with the band the bench judges within around it, and marks that say what a
point is: a run judged against the baseline, the baseline's own run, a run not comparable
with it, a disturbed run, a failing verdict; a second series (a server's served rate) is drawn
beside the bench's.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from dataclasses import dataclass
from html import escape

WIDTH, HEIGHT = 640, 200
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 26, 34
BLUE, ORANGE, GREY, RED, GREEN = "#1565c0", "#e65100", "#9e9e9e", "#c62828", "#2e7d32"
MARKS = ("judged", "baseline", "not comparable", "disturbed", "drift", "failing")


@dataclass(frozen=True)
class Point:
    at: float  # seconds since the epoch
    value: float
    mark: str = "judged"  # one of MARKS
    status: str = ""  # the verdict on it, where one was given (said in its tooltip)


@dataclass(frozen=True)
class Series:
    """One quantity over time (a bench test's tokens/s, a server's served rate, memory)."""

    name: str
    points: tuple[Point, ...]
    unit: str = "t/s"
    baseline: float | None = None  # the value the newest verdict judged against
    band: float | None = None  # the fraction around the baseline the bench judges within
    beside: tuple[Series, ...] = ()  # drawn on the same axes (a served rate)
    reference: str = "baseline"  # what the dashed line is called (a watch: its median)


def _nice(top: float) -> float:
    """A round axis maximum at or above ``top`` (1, 2, 2.5 or 5 times a power of ten)."""
    if top <= 0 or not math.isfinite(top):
        return 1.0
    power = 10 ** math.floor(math.log10(top))
    return float(next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= top))


def _label(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _when(at: float, span: float = 86400.0) -> str:
    """A tick's date, as fine as the plot's span needs (seconds within an hour, days over a
    fortnight)."""
    fmt = "%Y-%m-%d" if span > 14 * 86400 else "%m-%d %H:%M" if span > 3600 else "%H:%M:%S"
    return dt.datetime.fromtimestamp(at, dt.timezone.utc).strftime(fmt)


def _marker(x: float, y: float, mark: str, color: str, title: str, failed: bool = False) -> str:
    """One point's mark, its words in a tooltip."""
    tip = f"<title>{escape(title)}</title>"
    if mark == "not comparable":
        return (f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="#fff" stroke="{GREY}" '
                f'stroke-width="1.5">{tip}</circle>')
    if mark == "disturbed":
        return (f'<path d="M{x - 4:.1f},{y - 4:.1f}L{x + 4:.1f},{y + 4:.1f}M{x - 4:.1f},'
                f'{y + 4:.1f}L{x + 4:.1f},{y - 4:.1f}" stroke="{RED if failed else ORANGE}" '
                'stroke-width="2">'
                f"{tip}</path>")
    if mark == "baseline":
        return (f'<rect x="{x - 3.5:.1f}" y="{y - 3.5:.1f}" width="7" height="7" '
                f'fill="{GREEN}">{tip}</rect>')
    if mark == "drift":  # a slide or a step: a triangle pointing down
        return (f'<path d="M{x - 4.5:.1f},{y - 3.5:.1f}L{x + 4.5:.1f},{y - 3.5:.1f}L{x:.1f},'
                f'{y + 4:.1f}Z" fill="{ORANGE}">{tip}</path>')
    fill = RED if mark == "failing" else color
    return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{fill}">{tip}</circle>'


def _baseline(series: Series, y: Callable[[float], float], inner_w: int) -> list[str]:
    """The baseline's dashed line, its label and the band judged within it."""
    if not series.baseline:
        return []
    out = []
    band = series.band or 0.0
    upper, lower = y(series.baseline * (1 + band)), y(series.baseline * (1 - band))
    if band:
        out.append(f'<rect x="{LEFT}" y="{upper:.1f}" width="{inner_w}" '
                   f'height="{lower - upper:.1f}" fill="#c8e6c9" opacity="0.6">'
                   f"<title>{escape(f'judged within ±{band:.0%} of the baseline')}</title>"
                   "</rect>")
    base = y(series.baseline)
    out.append(f'<line x1="{LEFT}" x2="{LEFT + inner_w}" y1="{base:.1f}" y2="{base:.1f}" '
               f'stroke="{GREEN}" stroke-dasharray="5 3"/>')
    out.append(f'<text x="{LEFT + inner_w - 4}" y="{base - 4:.1f}" text-anchor="end" '
               f'fill="{GREEN}">'
               f"{escape(f'{series.reference} {_label(series.baseline)} {series.unit}')}"
               + (escape(f" ±{band:.0%}") if band else "") + "</text>")
    return out


def _y_ticks(top: float, y: Callable[[float], float]) -> list[str]:
    """The y axis' ticks: 0 to the top in quarters."""
    out = []
    for i in range(5):
        value = top * i / 4
        out.append(f'<line x1="{LEFT - 4}" x2="{LEFT}" y1="{y(value):.1f}" y2="{y(value):.1f}" '
                   'stroke="#999"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y(value) + 4:.1f}" text-anchor="end">'
                   f"{escape(_label(value))}</text>")
    return out


def _x_ticks(lo: float, hi: float, moments: int, x: Callable[[float], float],
             bottom: float) -> list[str]:
    """The x axis' ticks: dates, UTC (at most four, one per moment plotted)."""
    span = hi - lo or 1.0
    out = []
    ticks = 1 if hi == lo else min(4, moments)
    for i in range(ticks):
        at = lo if ticks == 1 else lo + span * i / (ticks - 1)
        anchor = "middle" if ticks == 1 else ("start" if i == 0 else
                                              "end" if i == ticks - 1 else "middle")
        out.append(f'<line x1="{x(at):.1f}" x2="{x(at):.1f}" y1="{bottom}" '
                   f'y2="{bottom + 4}" stroke="#999"/>')
        out.append(f'<text x="{x(at):.1f}" y="{bottom + 16}" text-anchor="{anchor}">'
                   f"{escape(_when(at, hi - lo))}</text>")
    return out


def svg(series: Series, width: int = WIDTH, height: int = HEIGHT) -> str:
    """The plot of ``series`` (and what is drawn beside it) as one ``<svg>`` element."""
    every = [series, *series.beside]
    points = [p for s in every for p in s.points]
    if not points:
        return ""
    lo, hi = min(p.at for p in points), max(p.at for p in points)
    span = hi - lo or 1.0
    top = _nice(max([p.value for p in points]
                    + ([series.baseline * (1 + (series.band or 0))] if series.baseline else []))
                * 1.05)
    inner_w, inner_h = width - LEFT - RIGHT, height - TOP - BOTTOM

    def x(at: float) -> float:
        return LEFT + (inner_w / 2 if hi == lo else (at - lo) / span * inner_w)

    def y(value: float) -> float:
        return TOP + inner_h - max(0.0, min(value, top)) / top * inner_h

    title = f"{series.name}: {len(series.points)} runs, {_when(lo)} to {_when(hi)} UTC"
    out = [f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
           f'aria-label="{escape(title)}" font-family="system-ui,sans-serif" font-size="11">',
           f"<title>{escape(title)}</title>",
           f'<rect x="{LEFT}" y="{TOP}" width="{inner_w}" height="{inner_h}" fill="#fafafa" '
           'stroke="#ddd"/>']
    out += _baseline(series, y, inner_w) + _y_ticks(top, y)
    out.append(f'<text x="12" y="{TOP + inner_h / 2:.1f}" text-anchor="middle" '
               f'transform="rotate(-90 12 {TOP + inner_h / 2:.1f})">{escape(series.unit)}</text>')
    out += _x_ticks(lo, hi, len({p.at for p in points}), x, TOP + inner_h)
    out.append(f'<text x="{LEFT + inner_w}" y="{height - 4}" text-anchor="end" fill="#666">'
               "UTC</text>")
    legend = []
    for i, s in enumerate(every):
        color = (BLUE, ORANGE, "#6a1b9a", "#00838f")[i % 4]
        line = [p for p in s.points if p.mark != "not comparable"]
        if len(line) > 1:
            out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="'
                       + " ".join(f"{x(p.at):.1f},{y(p.value):.1f}" for p in line) + '"/>')
        for p in s.points:
            said = p.mark + (f", {p.status}" if p.status and p.status != "pass" else "")
            out.append(_marker(x(p.at), y(p.value), p.mark, color,
                               f"{s.name} {_when(p.at)}: {_label(p.value)} {s.unit} ({said})",
                               p.status == "fail"))
        legend.append((s.name, color))
    kinds = sorted({p.mark for s in every for p in s.points} - {"judged"}, key=MARKS.index)
    words = {"baseline": "\u25a0 baseline run", "not comparable": "\u25cb not comparable",
             "disturbed": "\u00d7 disturbed", "drift": "\u25bc slide or step",
             "failing": "\u25cf failing verdict"}
    text = "   ".join([f"\u25cf {name}" for name, _ in legend] + [words[k] for k in kinds])
    out.append(f'<text x="{LEFT}" y="16">{escape(text)}</text>')
    out.append("</svg>")
    return "".join(out)



@dataclass(frozen=True)
class Bar:
    """One factor of ``bench --why``: what setting it back did to a test's rate."""

    label: str
    effect: float  # the fraction setting it back changed the rate by (+: it cost)
    uncertainty: float = 0.0  # two standard errors, as a fraction
    measurable: bool = False


def bars(title: str, rows: tuple[Bar, ...], width: int = WIDTH) -> str:
    """A drop split by factor as one ``<svg>``: a horizontal bar a factor from a zero line,
    its interval as a whisker, solid where it is measurable and pale where it is not."""
    if not rows:
        return ""
    row_h, label_w = 22, 230
    height = TOP + row_h * len(rows) + 12
    top = _nice(max(abs(r.effect) + r.uncertainty for r in rows) * 1.05 or 0.01)
    inner = width - label_w - RIGHT
    zero = label_w + inner / 2

    def x(value: float) -> float:
        return zero + max(-top, min(value, top)) / top * inner / 2

    out = [f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
           f'aria-label="{escape(title)}" font-family="system-ui,sans-serif" font-size="11">',
           f"<title>{escape(title)}</title>",
           f'<text x="4" y="14" font-weight="600">{escape(title)}</text>',
           f'<line x1="{zero:.1f}" x2="{zero:.1f}" y1="{TOP - 6}" y2="{height - 8}" '
           'stroke="#999"/>']
    for i, r in enumerate(rows):
        mid = TOP + row_h * i + row_h / 2
        left, right = sorted((x(0.0), x(r.effect)))
        color = (RED if r.effect > 0 else GREEN) if r.measurable else GREY
        said = (f"{r.label}: {r.effect:+.1%} ±{r.uncertainty:.1%} set back ("
                + ("measurable" if r.measurable else "no measurable difference") + ")")
        out.append(f'<text x="{label_w - 6}" y="{mid + 4:.1f}" text-anchor="end">'
                   f"{escape(r.label)}</text>")
        out.append(f'<rect x="{left:.1f}" y="{mid - 7:.1f}" width="{max(right - left, 1):.1f}" '
                   f'height="14" fill="{color}"><title>{escape(said)}</title></rect>')
        out.append(f'<line x1="{x(r.effect - r.uncertainty):.1f}" '
                   f'x2="{x(r.effect + r.uncertainty):.1f}" y1="{mid:.1f}" y2="{mid:.1f}" '
                   'stroke="#333"/>')
    out.append("</svg>")
    return "\n".join(out)
