"""Small dependency-free SVG charts (log or linear axes, points, polylines, a legend), so reports open offline."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from html import escape

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f")


@dataclass
class Series:
    name: str
    points: list[tuple[float, float]]
    line: bool = True
    dashed: bool = False
    color: str | None = None
    labels: list[str] = field(default_factory=list)


@dataclass
class Axis:
    label: str
    log: bool = True
    lo: float | None = None
    hi: float | None = None


def _ticks(lo: float, hi: float, log: bool) -> list[float]:
    if log:
        return [10.0**e for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)]
    step = 10 ** math.floor(math.log10((hi - lo) / 4 or 1))
    for m in (1, 2, 5, 10):
        if (hi - lo) / (step * m) <= 6:
            step *= m
            break
    start = math.floor(lo / step) * step
    return [start + i * step for i in range(int((hi - start) / step) + 2)]


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1e4 or abs(v) < 1e-2:
        e = math.floor(math.log10(abs(v)))
        m = v / 10**e
        return f"1e{e}" if abs(m - 1) < 1e-9 else f"{m:.1f}e{e}"
    return f"{v:g}"


def _frac(v: float, lo: float, hi: float, log: bool) -> float:
    if log:
        return (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))
    return (v - lo) / (hi - lo)


def chart(title: str, series: list[Series], x: Axis, y: Axis, width: int = 640, height: int = 400) -> str:
    pts = [p for s in series for p in s.points if p[0] > 0 and p[1] > 0]
    if not pts:
        return f'<p class="empty">{escape(title)}: no data</p>'
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    xlo, xhi = x.lo or min(xs), x.hi or max(xs)
    ylo, yhi = y.lo or min(ys), y.hi or max(ys)
    if x.log:
        xlo, xhi = xlo / 1.5, xhi * 1.5
    if y.log:
        ylo, yhi = ylo / 1.5, yhi * 1.5
    else:
        ylo, yhi = min(0.0, ylo), yhi * 1.1
    if xhi <= xlo:
        xhi = xlo * 10 if x.log else xlo + 1
    if yhi <= ylo:
        yhi = ylo * 10 if y.log else ylo + 1
    left, right, top, bottom = 70, 170, 30, 50
    pw, ph = width - left - right, height - top - bottom

    def tx(v):
        return left + _frac(v, xlo, xhi, x.log) * pw

    def ty(v):
        return top + ph - _frac(v, ylo, yhi, y.log) * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
           f'aria-label="{escape(title)}" font-family="sans-serif" font-size="11">',
           f'<text x="{left}" y="18" font-size="13" font-weight="bold">{escape(title)}</text>',
           f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>']
    for t in _ticks(xlo, xhi, x.log):
        if xlo <= t <= xhi:
            out.append(f'<line x1="{tx(t):.1f}" y1="{top}" x2="{tx(t):.1f}" y2="{top + ph}" stroke="#eee"/>'
                       f'<text x="{tx(t):.1f}" y="{top + ph + 15}" text-anchor="middle">{_fmt(t)}</text>')
    for t in _ticks(ylo, yhi, y.log):
        if ylo <= t <= yhi:
            out.append(f'<line x1="{left}" y1="{ty(t):.1f}" x2="{left + pw}" y2="{ty(t):.1f}" stroke="#eee"/>'
                       f'<text x="{left - 5}" y="{ty(t) + 4:.1f}" text-anchor="end">{_fmt(t)}</text>')
    out.append(f'<text x="{left + pw / 2}" y="{height - 10}" text-anchor="middle">{escape(x.label)}</text>')
    out.append(f'<text x="15" y="{top + ph / 2}" text-anchor="middle" '
               f'transform="rotate(-90 15 {top + ph / 2})">{escape(y.label)}</text>')
    out.append(f'<clipPath id="clip"><rect x="{left}" y="{top}" width="{pw}" height="{ph}"/></clipPath>')
    for i, s in enumerate(series):
        color = s.color or PALETTE[i % len(PALETTE)]
        good = [(px, py) for px, py in s.points if px > 0 and py > 0]
        if s.line and len(good) > 1:
            d = " ".join(f"{tx(px):.1f},{ty(py):.1f}" for px, py in good)
            dash = ' stroke-dasharray="6,4"' if s.dashed else ""
            out.append(f'<polyline points="{d}" fill="none" stroke="{color}" stroke-width="1.5"{dash} '
                       f'clip-path="url(#clip)"/>')
        if not s.dashed:
            for j, (px, py) in enumerate(good):
                tip = s.labels[j] if j < len(s.labels) else f"{s.name}: ({_fmt(px)}, {_fmt(py)})"
                out.append(f'<circle cx="{tx(px):.1f}" cy="{ty(py):.1f}" r="4" fill="{color}">'
                           f'<title>{escape(tip)}</title></circle>')
        ly = top + 12 + 16 * i
        out.append(f'<rect x="{left + pw + 12}" y="{ly - 8}" width="10" height="10" fill="{color}"/>'
                   f'<text x="{left + pw + 27}" y="{ly + 1}">{escape(s.name)}</text>')
    out.append("</svg>")
    return "\n".join(out)
