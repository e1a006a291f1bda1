"""Static HTML + SVG poster of a figure's default state, made at build time.

The poster is inlined in the page, so a figure is painted with the page's first paint,
long before BokehJS (2.5 MB of JavaScript) is parsed or Python is loaded. It is a
faithful sketch, not a second renderer: it walks the figure's Panel layout, draws each
Bokeh plot's axes, ticks, grid and glyphs from the plot's own data sources, and shows
each control with its label and current value. Glyph types it does not know are left
out (the live figure replaces the poster within seconds).
"""
from __future__ import annotations

import html
import math
from typing import Any

import numpy as np
import panel as pn
from bokeh.models import FactorRange, GlyphRenderer, Legend, LogScale, Range1d, Span
from bokeh.models.glyphs import (Circle, HBar, Line, MultiLine, Patch, Quad, Rect, Scatter, Segment,
                                 Step, Text, VArea, VBar)

from widgets.base import legends

PAD = dict(left=62, right=16, top=46, bottom=46)     # px around the plot area, like Bokeh's defaults
FONT = "font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif"
NAMED_DASH = {"dashed": "6 4", "dotted": "2 3", "dotdash": "2 3 6 3", "dashdot": "6 3 2 3"}


def e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def fmt(v: float) -> str:
    """Tick label like Bokeh's BasicTickFormatter for typical ranges."""
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e5 or a < 1e-3:
        m, ex = f"{v:.1e}".split("e")
        return f"{m.rstrip('0').rstrip('.')}e{int(ex)}"
    s = f"{v:.6g}"
    return s


# ----------------------------------------------------------------------------- ranges and ticks


def nice_ticks(lo: float, hi: float, want: int = 6) -> list[float]:
    """Round tick positions (1, 2, 5 x 10^k steps) covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / max(want - 1, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    ticks, t = [], first
    while t <= hi + 1e-9 * step:
        ticks.append(round(t, 12))
        t += step
    return ticks


def log_ticks(lo: float, hi: float) -> list[float]:
    """Powers of ten inside [lo, hi] (lo, hi > 0); thinned to at most ~8."""
    a, b = math.ceil(math.log10(lo) - 1e-9), math.floor(math.log10(hi) + 1e-9)
    exps = list(range(a, b + 1))
    stride = max(1, math.ceil(len(exps) / 8))
    return [10.0 ** k for k in exps[::stride]] or [lo]


def _given(v) -> float | None:
    """A range bound that was set (Bokeh leaves unset DataRange1d bounds as NaN)."""
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


class Axis1D:
    """Maps data values to pixels along one axis (linear, log or categorical)."""

    def __init__(self, rng, log: bool, values: list[np.ndarray], px0: float, px1: float):
        self.log, self.px0, self.px1, self.factors = log, px0, px1, None
        if isinstance(rng, FactorRange):
            self.factors = [f if isinstance(f, str) else "/".join(f) for f in rng.factors]
            self.lo, self.hi = 0.0, float(len(self.factors))
            return
        start, end = _given(getattr(rng, "start", None)), _given(getattr(rng, "end", None))
        if isinstance(rng, Range1d) or (start is not None and end is not None):
            lo, hi = start, end
        else:
            flat = np.concatenate([np.asarray(v, float).ravel() for v in values]) if values else np.array([])
            flat = flat[np.isfinite(flat)]
            if log:
                flat = flat[flat > 0]
            if flat.size == 0:
                lo, hi = (1.0, 10.0) if log else (0.0, 1.0)
            else:
                lo, hi = float(flat.min()), float(flat.max())
            pad = getattr(rng, "range_padding", 0.1) or 0.0
            if log:
                llo, lhi = math.log10(lo), math.log10(hi)
                span = (lhi - llo) or 1.0
                lo, hi = 10 ** (llo - span * pad / 2), 10 ** (lhi + span * pad / 2)
            else:
                span = (hi - lo) or (abs(hi) or 1.0)
                lo, hi = lo - span * pad / 2, hi + span * pad / 2
            lo = start if start is not None else lo
            hi = end if end is not None else hi
        self.lo, self.hi = lo, hi

    def __call__(self, v) -> np.ndarray:
        if self.factors is not None:
            idx = {f: i + 0.5 for i, f in enumerate(self.factors)}
            v = np.array([idx.get(x if isinstance(x, str) else "/".join(x), np.nan) for x in np.atleast_1d(v)])
        v = np.atleast_1d(np.asarray(v, float))
        if self.log:
            with np.errstate(divide="ignore", invalid="ignore"):
                v = np.where(v > 0, np.log10(np.where(v > 0, v, 1)), np.nan)
            lo, hi = math.log10(self.lo), math.log10(self.hi)
        else:
            lo, hi = self.lo, self.hi
        return self.px0 + (v - lo) / ((hi - lo) or 1.0) * (self.px1 - self.px0)

    def ticks(self) -> list[tuple[float, str]]:
        if self.factors is not None:
            return [(i + 0.5, f) for i, f in enumerate(self.factors)]
        if self.log and self.hi / self.lo >= 10:
            return [(t, fmt(t)) for t in log_ticks(self.lo, self.hi)]
        return [(t, fmt(t)) for t in nice_ticks(self.lo, self.hi)]


# ----------------------------------------------------------------------------- glyphs


def spec(glyph, name: str, data: dict, n: int) -> np.ndarray | list | None:
    """A glyph property as an array of length n: a column, or a constant repeated."""
    v = getattr(glyph, name, None)
    if v is None:
        return None
    if isinstance(v, str) and v in data:
        return data[v]
    if isinstance(v, dict):
        if "field" in v:
            return data.get(v["field"])
        if "value" in v:
            v = v["value"]
    for attr in ("field",):
        if hasattr(v, attr) and getattr(v, attr) in data:
            return data[getattr(v, attr)]
    if hasattr(v, "value"):
        v = v.value
    return [v] * n


def style(glyph, kind: str, i: int = 0, data: dict | None = None, n: int = 1) -> str:
    """SVG stroke/fill attributes of a glyph's line_* or fill_* visuals."""
    def one(name, default=None):
        if not hasattr(glyph, name):
            return default
        if getattr(glyph, name) is None:       # explicitly switched off, e.g. line_color=None
            return None
        vals = spec(glyph, name, data or {}, n)
        if vals is None or len(vals) == 0:
            return default
        return vals[min(i, len(vals) - 1)]
    out = []
    if kind in ("line", "both"):
        color = one("line_color", "black")
        if color is None:
            out.append('stroke="none"')
        else:
            out.append(f'stroke="{e(color)}" stroke-width="{one("line_width", 1)}"')
            alpha = one("line_alpha", 1.0)
            if alpha != 1:
                out.append(f'stroke-opacity="{alpha}"')
            dash = getattr(glyph, "line_dash", None)
            if isinstance(dash, str) and dash in NAMED_DASH:
                out.append(f'stroke-dasharray="{NAMED_DASH[dash]}"')
            elif isinstance(dash, (list, tuple)) and dash:
                out.append(f'stroke-dasharray="{" ".join(map(str, dash))}"')
    if kind in ("fill", "both"):
        color = one("fill_color", "gray")
        out.append(f'fill="{e(color)}"' if color is not None else 'fill="none"')
        alpha = one("fill_alpha", 1.0)
        if alpha != 1:
            out.append(f'fill-opacity="{alpha}"')
    else:
        out.append('fill="none"')
    return " ".join(out)


def finite(*arrs) -> np.ndarray:
    m = np.ones(len(arrs[0]), bool)
    for a in arrs:
        m &= np.isfinite(np.asarray(a, float))
    return m


def rect_svg(x0, x1, y0, y1, st: str) -> list[str]:
    """An SVG rect between two pixel corners (nothing when a corner is not finite)."""
    x0, x1, y0, y1 = (float(np.asarray(v).ravel()[0]) for v in (x0, x1, y0, y1))
    if not all(map(math.isfinite, (x0, x1, y0, y1))):
        return []
    return [f'<rect x="{min(x0, x1):.1f}" y="{min(y0, y1):.1f}" width="{abs(x1-x0):.1f}" '
            f'height="{abs(y1-y0):.1f}" {st}/>']


def draw_glyph(r: GlyphRenderer, X: Axis1D, Y: Axis1D) -> list[str]:
    g, data = r.glyph, dict(r.data_source.data)
    n = len(next(iter(data.values()), []))
    out: list[str] = []
    if isinstance(g, (Line, Step)):
        xs, ys = X(spec(g, "x", data, n)), Y(spec(g, "y", data, n))
        ok = finite(xs, ys)
        if ok.sum() >= 2:
            pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in zip(xs[ok], ys[ok]))
            out.append(f'<polyline points="{pts}" {style(g, "line")}/>')
    elif isinstance(g, MultiLine):
        for i, (xv, yv) in enumerate(zip(spec(g, "xs", data, n), spec(g, "ys", data, n))):
            xs, ys = X(xv), Y(yv)
            ok = finite(xs, ys)
            pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in zip(xs[ok], ys[ok]))
            out.append(f'<polyline points="{pts}" {style(g, "line", i, data, n)}/>')
    elif isinstance(g, (Scatter, Circle)):
        xs, ys = X(spec(g, "x", data, n)), Y(spec(g, "y", data, n))
        sizes = spec(g, "size", data, n) if hasattr(g, "size") else [8] * n
        marker = getattr(g, "marker", "circle")
        for i in np.flatnonzero(finite(xs, ys)):
            rad = float(sizes[min(i, len(sizes) - 1)] or 8) / 2
            st = style(g, "both", i, data, n)
            if isinstance(marker, str) and marker in ("square", "square_pin"):
                out.append(f'<rect x="{xs[i]-rad:.1f}" y="{ys[i]-rad:.1f}" width="{2*rad:.1f}" '
                           f'height="{2*rad:.1f}" {st}/>')
            elif isinstance(marker, str) and marker.startswith("triangle"):
                out.append(f'<polygon points="{xs[i]:.1f},{ys[i]-rad:.1f} {xs[i]+rad:.1f},{ys[i]+rad:.1f} '
                           f'{xs[i]-rad:.1f},{ys[i]+rad:.1f}" {st}/>')
            else:
                out.append(f'<circle cx="{xs[i]:.1f}" cy="{ys[i]:.1f}" r="{rad:.1f}" {st}/>')
    elif isinstance(g, (VBar, HBar, Quad, Rect)):
        if isinstance(g, VBar):
            xc, w = spec(g, "x", data, n), spec(g, "width", data, n)
            top, bottom = spec(g, "top", data, n), spec(g, "bottom", data, n)
            boxes = [(xc[i], w[i], None, None, top[i], bottom[i]) for i in range(n)]
        elif isinstance(g, HBar):
            yc, h = spec(g, "y", data, n), spec(g, "height", data, n)
            left, right = spec(g, "left", data, n), spec(g, "right", data, n)
            boxes = [(None, None, yc[i], h[i], left[i], right[i]) for i in range(n)]
        else:
            boxes = []
        for i, b in enumerate(boxes):
            if isinstance(g, VBar):
                if X.factors is not None:
                    cx = float(X(b[0])[0])
                    half = (X.px1 - X.px0) / len(X.factors) * float(b[1]) / 2
                    x0, x1 = cx - half, cx + half
                else:
                    x0, x1 = X(float(b[0]) - float(b[1]) / 2), X(float(b[0]) + float(b[1]) / 2)
                y0, y1 = Y(b[5]), Y(b[4])
            else:
                if Y.factors is not None:
                    cy = float(Y(b[2])[0])
                    half = (Y.px0 - Y.px1) / len(Y.factors) * float(b[3]) / 2
                    y0, y1 = cy + half, cy - half
                else:
                    y0, y1 = Y(float(b[2]) - float(b[3]) / 2), Y(float(b[2]) + float(b[3]) / 2)
                x0, x1 = X(b[4]), X(b[5])
            out += rect_svg(x0, x1, y0, y1, style(g, "both", i, data, n))
        if isinstance(g, Quad):
            L, R, T, B = (spec(g, k, data, n) for k in ("left", "right", "top", "bottom"))
            for i in range(n):
                out += rect_svg(X(L[i]), X(R[i]), Y(B[i]), Y(T[i]), style(g, "both", i, data, n))
        if isinstance(g, Rect):
            xc, yc = spec(g, "x", data, n), spec(g, "y", data, n)
            w, h = spec(g, "width", data, n), spec(g, "height", data, n)
            for i in range(n):
                cx, cy = X(xc[i]), Y(yc[i])
                pw = abs(float(X(float(xc[i]) + float(w[i]) / 2)[0] - X(float(xc[i]) - float(w[i]) / 2)[0])) \
                    if X.factors is None else (X.px1 - X.px0) / len(X.factors) * float(w[i])
                ph = abs(float(Y(float(yc[i]) + float(h[i]) / 2)[0] - Y(float(yc[i]) - float(h[i]) / 2)[0])) \
                    if Y.factors is None else (Y.px0 - Y.px1) / len(Y.factors) * float(h[i])
                cx, cy = float(np.ravel(cx)[0]), float(np.ravel(cy)[0])
                if all(map(math.isfinite, (cx, cy, pw, ph))):
                    out.append(f'<rect x="{cx-pw/2:.1f}" y="{cy-ph/2:.1f}" width="{pw:.1f}" height="{ph:.1f}" '
                               f'{style(g, "both", i, data, n)}/>')
    elif isinstance(g, Segment):
        x0, y0 = X(spec(g, "x0", data, n)), Y(spec(g, "y0", data, n))
        x1, y1 = X(spec(g, "x1", data, n)), Y(spec(g, "y1", data, n))
        for i in np.flatnonzero(finite(x0, y0, x1, y1)):
            out.append(f'<line x1="{x0[i]:.1f}" y1="{y0[i]:.1f}" x2="{x1[i]:.1f}" y2="{y1[i]:.1f}" '
                       f'{style(g, "line", i, data, n)}/>')
    elif isinstance(g, (VArea, Patch)):
        if isinstance(g, VArea):
            xs = X(spec(g, "x", data, n))
            y1, y2 = Y(spec(g, "y1", data, n)), Y(spec(g, "y2", data, n))
            ok = finite(xs, y1, y2)
            pts = [*zip(xs[ok], y1[ok]), *reversed(list(zip(xs[ok], y2[ok])))]
        else:
            xs, ys = X(spec(g, "x", data, n)), Y(spec(g, "y", data, n))
            ok = finite(xs, ys)
            pts = list(zip(xs[ok], ys[ok]))
        if len(pts) >= 3:
            out.append(f'<polygon points="{" ".join(f"{x:.1f},{y:.1f}" for x, y in pts)}" '
                       f'{style(g, "fill")} stroke="none"/>')
    elif isinstance(g, Text):
        xs, ys, texts = X(spec(g, "x", data, n)), Y(spec(g, "y", data, n)), spec(g, "text", data, n)
        colors = spec(g, "text_color", data, n) or ["#444"] * n
        dx = spec(g, "x_offset", data, n) if hasattr(g, "x_offset") else [0] * n
        dy = spec(g, "y_offset", data, n) if hasattr(g, "y_offset") else [0] * n
        align = {"left": "start", "center": "middle", "right": "end"}.get(
            g.text_align if isinstance(g.text_align, str) else "left", "start")
        size = g.text_font_size if isinstance(g.text_font_size, str) else "11px"
        for i in np.flatnonzero(finite(xs, ys)):
            x = xs[i] + float(dx[i] or 0)
            y = ys[i] + float(dy[i] or 0)
            out.append(f'<text x="{x:.1f}" y="{y:.1f}" font-size="{e(size)}" text-anchor="{align}" '
                       f'fill="{e(colors[i] or "#444")}">{e(texts[i])}</text>')
    return out


def glyph_values(r: GlyphRenderer, axis: str) -> list[np.ndarray]:
    """The data a renderer contributes to an auto-ranged axis."""
    g, data = r.glyph, r.data_source.data
    n = len(next(iter(data.values()), []))
    names = {"x": ["x", "x0", "x1", "left", "right", "xs"], "y": ["y", "y0", "y1", "y2", "top", "bottom", "ys"]}[axis]
    out = []
    for name in names:
        if not hasattr(g, name):
            continue
        v = spec(g, name, data, n)
        if v is None:
            continue
        try:
            arr = np.asarray(v, float).ravel() if name not in ("xs", "ys") else \
                np.concatenate([np.asarray(a, float) for a in v]) if len(v) else np.array([])
        except (TypeError, ValueError):
            continue
        out.append(arr)
    return out


def _legend_label(item) -> str:
    return item.label.get("value") if isinstance(item.label, dict) else getattr(item.label, "value", item.label)


def _legend_item_width(label: str) -> float:
    return 30 + 6.2 * len(label)      # swatch, gap and 11px text


def _legend_rows(legend, width: float) -> int:
    """Rows a horizontal legend wraps into across `width` pixels (one for a vertical legend: it is not banded)."""
    if legend.orientation != "horizontal":
        return 1
    rows, x = 1, 0.0
    for item in legend.items:
        w = _legend_item_width(_legend_label(item) or "")
        if x and x + w > width:
            rows, x = rows + 1, 0.0
        x += w
    return rows


def plot_svg(p) -> str:
    """An SVG sketch of a Bokeh plot: frame, grid, ticks, labels, glyphs, spans, legend."""
    W, H = int(p.width or 600), int(p.height or 400)
    x0, x1 = PAD["left"], W - PAD["right"]
    above = [a for a in p.above if isinstance(a, Legend)]       # drawn in a band between title and frame
    rows = [_legend_rows(a, x1 - x0) for a in above]
    y0, y1 = H - PAD["bottom"], PAD["top"] + 16 * sum(rows) + 2 * len(above)
    renderers = [r for r in p.renderers if isinstance(r, GlyphRenderer) and r.visible]
    xlog, ylog = isinstance(p.x_scale, LogScale), isinstance(p.y_scale, LogScale)
    X = Axis1D(p.x_range, xlog, [v for r in renderers for v in glyph_values(r, "x")], x0, x1)
    Y = Axis1D(p.y_range, ylog, [v for r in renderers for v in glyph_values(r, "y")], y0, y1)
    parts = [f'<svg class="fig-poster-plot" viewBox="0 0 {W} {H}" width="{W}" height="{H}" '
             f'xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{e(p.title.text if p.title else "")}" '
             f'style="{FONT}">',
             f'<rect x="0" y="0" width="{W}" height="{H}" fill="white"/>']
    if p.title is not None and p.title.text:
        parts.append(f'<text x="{x0}" y="{PAD["top"] - 12}" font-size="13" font-weight="600" '
                     f'fill="#444">{e(p.title.text)}</text>')
    parts.append(f'<clipPath id="clip-{p.id}"><rect x="{x0}" y="{y1}" width="{x1-x0}" height="{y0-y1}"/></clipPath>')
    show = lambda items: bool(items) and all(getattr(a, "visible", True) for a in items)   # noqa: E731
    x_axis, y_axis, x_grid, y_grid = show(p.xaxis), show(p.yaxis), show(p.xgrid), show(p.ygrid)
    for pos, label in X.ticks():
        px = float(X(pos)[0]) if X.factors is None else X.px0 + (pos) / len(X.factors) * (X.px1 - X.px0)
        if x0 - 0.5 <= px <= x1 + 0.5:
            if x_grid:
                parts.append(f'<line x1="{px:.1f}" y1="{y1}" x2="{px:.1f}" y2="{y0}" stroke="#e5e5e5"/>')
            if x_axis:
                parts.append(f'<text x="{px:.1f}" y="{y0 + 16}" font-size="11" fill="#444" text-anchor="middle">{e(label)}</text>')
    for pos, label in Y.ticks():
        py = float(Y(pos)[0]) if Y.factors is None else Y.px0 + (pos) / len(Y.factors) * (Y.px1 - Y.px0)
        if y1 - 0.5 <= py <= y0 + 0.5:
            if y_grid:
                parts.append(f'<line x1="{x0}" y1="{py:.1f}" x2="{x1}" y2="{py:.1f}" stroke="#e5e5e5"/>')
            if y_axis:
                parts.append(f'<text x="{x0 - 6}" y="{py + 4:.1f}" font-size="11" fill="#444" text-anchor="end">{e(label)}</text>')
    parts.append(f'<g clip-path="url(#clip-{p.id})">')
    for r in renderers:
        parts += draw_glyph(r, X, Y)
    for a in p.center:
        if isinstance(a, Span) and a.location is not None and a.visible:
            dash = NAMED_DASH.get(a.line_dash, "") if isinstance(a.line_dash, str) else ""
            st = f'stroke="{e(a.line_color)}" stroke-width="{a.line_width}"' + (f' stroke-dasharray="{dash}"' if dash else "")
            if a.dimension == "height":
                px = float(X(a.location)[0])
                parts.append(f'<line x1="{px:.1f}" y1="{y1}" x2="{px:.1f}" y2="{y0}" {st}/>')
            else:
                py = float(Y(a.location)[0])
                parts.append(f'<line x1="{x0}" y1="{py:.1f}" x2="{x1}" y2="{py:.1f}" {st}/>')
    parts.append("</g>")
    parts.append(f'<rect x="{x0}" y="{y1}" width="{x1-x0}" height="{y0-y1}" fill="none" stroke="#ccc"/>')
    xl = p.xaxis[0].axis_label if x_axis else None
    yl = p.yaxis[0].axis_label if y_axis else None
    if xl:
        parts.append(f'<text x="{(x0+x1)/2:.0f}" y="{H - 8}" font-size="12" fill="#444" text-anchor="middle">{e(xl)}</text>')
    if yl:
        parts.append(f'<text transform="translate(14 {(y0+y1)/2:.0f}) rotate(-90)" font-size="12" fill="#444" '
                     f'text-anchor="middle">{e(yl)}</text>')
    for legend in legends(p):
        band = legend in above
        i = above.index(legend) if band else 0
        ly, lx = (PAD["top"] + 10 + 16 * sum(rows[:i]) + 2 * i, x0) if band else (y1 + 14, x0 + 10)
        left = lx
        horizontal = legend.orientation == "horizontal"
        for item in legend.items:
            label = _legend_label(item)
            if not label or not item.renderers:
                continue
            g = item.renderers[0].glyph
            color = getattr(g, "line_color", None) if isinstance(g, (Line, Step, MultiLine, Segment)) else \
                getattr(g, "fill_color", None)
            color = color if isinstance(color, str) else "#666"
            if horizontal and lx > left and lx + _legend_item_width(label) > x1:
                lx, ly = left, ly + 16
            parts.append(f'<rect x="{lx}" y="{ly - 9}" width="12" height="10" fill="{e(color)}"/>')
            parts.append(f'<text x="{lx + 18}" y="{ly}" font-size="11" fill="#333">{e(label)}</text>')
            if horizontal:
                lx += _legend_item_width(label)
            else:
                ly += 16
    parts.append("</svg>")
    return "".join(parts)


# ----------------------------------------------------------------------------- layout and controls


def control_html(w) -> str:
    label = e(getattr(w, "label", None) or w.name or "")
    width = f"width:{int(w.width)}px" if getattr(w, "width", None) else ""
    if isinstance(w, (pn.widgets.IntSlider, pn.widgets.FloatSlider, pn.widgets.DiscreteSlider)):
        value = w.value
        if isinstance(w, pn.widgets.DiscreteSlider):
            opts = list(w.values)
            frac = opts.index(w.value) / max(len(opts) - 1, 1) if w.value in opts else 0
        else:
            frac = (value - w.start) / ((w.end - w.start) or 1)
        shown = f"{value:g}" if isinstance(value, float) else str(value)
        return (f'<div class="pst-ctl" style="{width}"><div class="pst-label">{label}: <b>{e(shown)}</b></div>'
                f'<div class="pst-slider"><span style="left:{100 * frac:.1f}%"></span></div></div>')
    if isinstance(w, pn.widgets.Select):
        opts = w.options if isinstance(w.options, dict) else {str(o): o for o in w.options}
        shown = next((k for k, v in opts.items() if v == w.value), w.value)
        return (f'<div class="pst-ctl" style="{width}"><div class="pst-label">{label}</div>'
                f'<div class="pst-select">{e(shown)}</div></div>')
    if isinstance(w, (pn.widgets.RadioButtonGroup, pn.widgets.RadioBoxGroup)):
        opts = list(w.options if not isinstance(w.options, dict) else w.options.keys())
        vals = list(w.options.values()) if isinstance(w.options, dict) else opts
        if isinstance(w, pn.widgets.RadioBoxGroup):          # a column of round radio buttons
            cells = "".join(f'<span>{"&#9673;" if v == w.value else "&#9675;"} {e(o)}</span>' for o, v in zip(opts, vals))
            kind = "pst-radio pst-boxes"
        else:                                                 # a row of buttons, one pressed
            cells = "".join(f'<span class="{"on" if v == w.value else ""}">{e(o)}</span>' for o, v in zip(opts, vals))
            kind = "pst-radio"
        return (f'<div class="pst-ctl" style="{width}"><div class="pst-label">{label}</div>'
                f'<div class="{kind}">{cells}</div></div>')
    if isinstance(w, (pn.widgets.Checkbox, pn.widgets.Toggle, pn.widgets.Switch)):
        mark = "&#9745;" if w.value else "&#9744;"
        return f'<div class="pst-ctl" style="{width}"><div class="pst-check">{mark} {label}</div></div>'
    if isinstance(w, pn.widgets.Player):
        buttons = "".join(f'<span class="pst-button">{g}</span>' for g in ("&#9198;", "&#9664;", "&#9654;", "&#9654;&#10073;", "&#9197;"))
        return (f'<div class="pst-ctl" style="{width}"><div class="pst-label">{label}: <b>{w.value}</b> '
                f'of {w.end}</div><div class="pst-player">{buttons}</div></div>')
    if isinstance(w, pn.widgets.Button):
        return f'<div class="pst-ctl pst-inline"><span class="pst-button">{label}</span></div>'
    return f'<div class="pst-ctl" style="{width}"><div class="pst-label">{label}</div></div>'


def layout_html(obj) -> str:
    """Walk a Panel layout into poster HTML (rows and columns as flex boxes)."""
    if isinstance(obj, pn.Row):
        inner = "".join(layout_html(o) for o in obj)
        return f'<div class="pst-row">{inner}</div>'
    if isinstance(obj, (pn.Column, pn.WidgetBox)):
        w = f' style="width:{int(obj.width)}px"' if obj.width else ""
        return f'<div class="pst-col"{w}>{"".join(layout_html(o) for o in obj)}</div>'
    if isinstance(obj, pn.pane.Bokeh):
        return plot_svg(obj.object) if hasattr(obj.object, "renderers") else ""
    if isinstance(obj, (pn.pane.HTML, pn.pane.Str)):
        w = f' style="width:{int(obj.width)}px"' if obj.width else ""
        return f'<div class="pst-html"{w}>{obj.object or ""}</div>'
    if isinstance(obj, pn.widgets.Widget):
        return control_html(obj)
    if isinstance(obj, pn.Spacer):
        return ""
    return ""


def poster_html(view) -> str:
    """The whole poster of a FigureView."""
    return f'<div class="pst" aria-hidden="true">{layout_html(view.layout)}</div>'
