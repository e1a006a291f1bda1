"""ch22-formats: one value in every number format, bit by bit.

A reader types a value (or steps it with the arrows); the figure shows the bits each format
stores for it (sign, exponent and mantissa fields apart), the value those bits mean, the
rounding error, where the value falls in each format's range, and what the two 4-bit block
formats (NVFP4, MXFP4) do with it in a block whose largest magnitude the reader picks.

Controls: the value, the block's largest magnitude (a multiple of the value's), the tensor's
largest magnitude (a multiple of the block's). One call: sim.format_bits.format_bits.
"""
from __future__ import annotations

import math

import numpy as np
import panel as pn
from bokeh.models import ColumnDataSource, FactorRange, Span

from sim import format_bits as fb
from widgets.base import (BLUE, CONTROL_WIDTH, GREY, VERMILION, FigureView, inset_legend, label_ticks, plot,
                          provenance, readout, watch)

FIGURE_ID = "ch22-formats"
TITLE = "Number formats bit by bit: what each format stores for a value"
COMPUTE = fb.format_bits
PARAMS = fb.FormatBitsParams
STATES = {  # named states (widgets.state), as the chapter uses them
    "past-fp16": {"value": 70000.0},
    "small-gradient": {"value": 1e-05},
    "outlier-block": {"value": 0.1, "block": 100.0},
}
LABELS = {"fp32": "fp32", "bf16": "bf16", "fp16": "fp16", "fp8_e4m3": "fp8 e4m3", "fp8_e5m2": "fp8 e5m2",
          "fp6_e2m3": "fp6 e2m3", "fp6_e3m2": "fp6 e3m2", "fp4_e2m1": "fp4 e2m1", "int8": "int8", "int4": "int4"}
BLOCK = {"the value's own": 1.0, "2 x the value's": 2.0, "10 x the value's": 10.0, "100 x the value's": 100.0,
         "1,000 x the value's": 1000.0}
TENSOR = {"the block's own": 1.0, "100 x the block's": 100.0, "10,000 x the block's": 1e4,
          "1,000,000 x the block's": 1e6}
FIELD_COLOURS = ("#444444", BLUE, "#9E3D00")      # sign, exponent, mantissa (each 4.5:1 or more on white)
SMALLEST_ERROR = 1e-9                               # the error plot's floor: an exact value is drawn there
SPINNER = ".bk-input { height: 52px; } .bk-spin-btn { min-height: 24px; }"   # its arrows: 24 px targets or more
WRAP = 'style="word-break: break-all"'            # a long mantissa or value wraps on a phone
DECADES = {10.0 ** k: f"1e{k}" for k in range(-45, 39, 15)}


def coloured_bits(bits: str, integer: bool) -> str:
    """A format's bit fields, each in its colour (an integer's bits: one field)."""
    if integer:
        return f'<code style="color:{FIELD_COLOURS[2]}">{bits}</code>'
    return " ".join(f'<code style="color:{c}">{part}</code>' for c, part in zip(FIELD_COLOURS, bits.split(" ")))


def shown(x: float) -> str:
    """A stored value as the shortest decimal that reads back to it (exact for every format here)."""
    if math.isnan(x) or math.isinf(x):
        return str(x)
    return repr(x) if abs(x) >= 1e-4 or x == 0 else f"{x:.17g}"


def build() -> FigureView:
    d = PARAMS()
    value = pn.widgets.FloatInput(label="Value", value=d.value, start=-1e38, end=1e38, step=0.1,
                                  width=CONTROL_WIDTH, stylesheets=[SPINNER])
    block = pn.widgets.Select(label="Largest magnitude in its block", options=BLOCK, value=1.0, width=CONTROL_WIDTH)
    tensor = pn.widgets.Select(label="Largest magnitude in the tensor (NVFP4)", options=TENSOR, value=1.0,
                               width=CONTROL_WIDTH)

    ranges = ColumnDataSource(data={"name": [], "lo": [], "normal": [], "hi": [], "stored": [], "error": [],
                                    "colour": []})
    names = [LABELS[n] for n in fb.NAMES][::-1]
    p_range = plot("Each format's range: subnormals (thin), normal values (thick); the value (line), "
                   "what is stored (dot)", "magnitude (log)", "", width=560, height=330, x_type="log",
                   y_range=FactorRange(factors=names), x_range=(1e-46, 1e39))
    p_range.hbar(y="name", left="lo", right="normal", height=0.25, source=ranges, fill_color=GREY, line_color=None)
    p_range.hbar(y="name", left="normal", right="hi", height=0.6, source=ranges, fill_color=BLUE, fill_alpha=0.5,
                 line_color=None)
    dots = p_range.scatter(x="stored", y="name", source=ranges, size=8, color=VERMILION)
    here = Span(location=d.value, dimension="height", line_color="#222", line_width=1.5)
    p_range.add_layout(here)
    label_ticks(p_range.xaxis, DECADES)
    inset_legend(p_range, [("stored", dots)], location="bottom_right")

    p_err = plot("Rounding error, relative (vermilion: lost)", "|stored - value| / |value| (log; exact at the left)",
                 "", width=300, height=330, x_type="log", y_range=FactorRange(factors=names),
                 x_range=(SMALLEST_ERROR / 2, 2.0))
    p_err.hbar(y="name", left=SMALLEST_ERROR / 2, right="error", height=0.6, source=ranges, fill_color="colour",
               line_color=None)
    label_ticks(p_err.xaxis, {10.0 ** k: f"1e{k}" for k in range(-9, 1, 3)})

    table, blocks, note = readout(width=880), readout(width=880), readout(width=880)

    def update() -> None:
        x = float(value.value if value.value is not None else 0.0)
        amax = abs(x) * block.value
        try:
            r = COMPUTE(PARAMS(value=x, block_amax=None if block.value == 1 else amax,      # None: the value's,
                               tensor_amax=None if tensor.value == 1 else amax * tensor.value))   # the block's
        except ValueError as exc:          # out of range: say so, keep the figure as it was
            table.object = f'<p class="fig-warning">Not computed: {exc}.</p>'
            return
        rows = [r.rows[n] for n in fb.NAMES]
        lost = [not math.isfinite(w.relative_error) or w.relative_error >= 1 for w in rows]
        ranges.data = {
            "name": [LABELS[w.name] for w in rows],
            "lo": [w.min_subnormal for w in rows],
            "normal": [w.min_normal for w in rows],
            "hi": [w.max_value for w in rows],
            "stored": [abs(w.stored) if math.isfinite(w.stored) and w.stored != 0 else np.nan for w in rows],
            "error": [1.0 if gone else max(w.relative_error, SMALLEST_ERROR) for w, gone in zip(rows, lost)],
            "colour": [VERMILION if gone else BLUE for gone in lost],
        }
        here.location = abs(x) if x != 0 else 1e-46
        body = "".join(
            f"<tr><th>{LABELS[w.name]}</th><td {WRAP}>{coloured_bits(w.bits, w.exponent_bits == 0)}</td>"
            f"<td {WRAP}>{shown(w.stored)}{' (saturated)' if w.saturated and math.isfinite(w.stored) else ''}</td>"
            f"<td>{w.error:+.3g}</td></tr>" for w in rows)
        table.object = (f'<table class="fig-numbers"><tr><th>format</th><th>bits: sign exponent mantissa</th>'
                        f"<th>stored</th><th>error</th></tr>{body}</table>")
        if r.blocks:
            b_rows = "".join(
                f"<tr><th>{b.name.upper()}, {b.block} a scale</th><td {WRAP}>{b.scale:.6g} "
                f"(<code>{b.scale_bits}</code>)</td><td>{b.element:g}</td><td {WRAP}>{shown(b.stored)}</td>"
                f"<td>{b.error:+.3g}</td></tr>" for b in r.blocks.values())
            blocks.object = ('<table class="fig-numbers"><tr><th>block format</th><th>scale (its own bits)</th>'
                             "<th>e2m1 value</th><th>stored</th><th>error</th></tr>"
                             f"{b_rows}</table>")
        else:
            blocks.object = '<p class="fig-warning">Zero needs no block scale: every format stores it exactly.</p>'
        note.object = provenance(
            "Rounding to nearest, ties to even, bit-exact with ml_dtypes' casts for every format it has "
            "(tests/test_sim_format_bits.py). fp32, fp16 (IEEE 754) and bf16 overflow to infinity; fp8 e5m2 too; "
            "fp8 e4m3 has no infinity, and a plain cast past 448 gives NaN (the OFP8 specification's "
            "non-saturating conversion; kernels usually saturate to 448 instead); fp6 and fp4 (OCP MX) have no "
            "infinity or NaN and saturate. int8 and int4 are raw codes with a scale of 1 (chapter 10 adds scales). "
            f"NVFP4: e2m1 values, one e4m3 scale per 16, under one fp32 scale for the tensor; MXFP4: e2m1 values, "
            f"one e8m0 power-of-two scale per 32 (sim.quant.quantize). The block holds the value and one value "
            f"of magnitude {amax:.6g}; the tensor's largest magnitude is {amax * tensor.value:.6g}.")

    watch([value, block, tensor], update)
    update()
    layout = pn.Column(
        pn.Row(pn.Column(value, block, tensor, width=CONTROL_WIDTH + 20),
               pn.Column(pn.Row(pn.pane.Bokeh(p_range), pn.pane.Bokeh(p_err)))),
        table, blocks, note)
    return FigureView(FIGURE_ID, layout, controls={"value": value, "block": block, "tensor": tensor},
                      sources={"ranges": ranges}, readouts={"table": table, "blocks": blocks, "note": note},
                      plots=[p_range, p_err])
