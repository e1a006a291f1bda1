"""ch10-quant: what a number format does to a weight tensor, and to decode speed.

A seeded weight matrix with heavy tails (and optionally a few outlier input channels) is
quantized to the chosen format: integers of 8 down to 2 bits, fp8 e4m3 / e5m2, bare fp4
e2m1, NVFP4 (e2m1 with an e4m3 scale per 16 values and an fp32 scale per tensor) or MXFP4
(e2m1 with a power-of-two e8m0 scale per 32). The histogram shows the weights, where
they land, and the levels one group can represent; the bars show the decode speed one
user gets on the chosen GPU with the blocks' weights stored that way.

Controls: format, bits (integer formats), scale granularity and group size, outlier
channels, GPU, weight-only or weights+activations, KV-cache dtype, batch.
One call: sim.quant.quantize_demo.
Shows: histogram with the levels of the first group and of the widest group, MSE, SQNR,
share rounded to zero, bits per weight with scales; decode tokens/s per user by format.
"""
from __future__ import annotations

import numpy as np
import panel as pn
from bokeh.models import ColumnDataSource, FactorRange

from sim.quant import QuantDemoParams, quantize_demo
from widgets.base import (BLUE, CONTROL_WIDTH, GREY, ORANGE, VERMILION, FigureView, fmt_ms, gpu_select, inset_legend,
                          plot, provenance, readout, rows_table, watch)

FIGURE_ID = "ch10-quant"
TITLE = "Quantizing a weight tensor: levels, error, and decode speed"
COMPUTE = quantize_demo
PARAMS = QuantDemoParams
STATES = {"int2": {"bits": 2}, "nvfp4-outliers": {"format": "nvfp4", "outliers": True},
          "b200-nvfp4-batch-256": {"format": "nvfp4", "gpu": "B200", "mode": "weights+activations", "batch": 256}}   # named states (widgets.state)
FORMATS = {"integer": "int", "fp8 e4m3": "fp8_e4m3", "fp8 e5m2": "fp8_e5m2", "fp4 e2m1": "fp4_e2m1",
           "NVFP4": "nvfp4", "MXFP4": "mxfp4"}
SCALES = {"per tensor": "tensor", "per output channel": "channel", "per group": "group"}


def build() -> FigureView:
    d = PARAMS()
    kind = pn.widgets.Select(label="Format", options=FORMATS, value="int", width=CONTROL_WIDTH)
    bits = pn.widgets.IntSlider(label="Bits (integer formats)", start=2, end=8, value=int(d.fmt[3:]),
                                width=CONTROL_WIDTH)
    granularity = pn.widgets.Select(label="Scales (NVFP4, MXFP4: fixed blocks)", options=SCALES,
                                    value=d.granularity, width=CONTROL_WIDTH)
    group = pn.widgets.Select(label="Group size", options=[16, 32, 64, 128, 256], value=d.group_size,
                              width=CONTROL_WIDTH)
    outliers = pn.widgets.Checkbox(label=f"Outlier channels ({d.outlier_fraction:.0%} of inputs x{d.outlier_scale:g})",
                                   value=d.outliers, width=CONTROL_WIDTH)
    gpu = gpu_select(d.gpu)
    mode = pn.widgets.RadioButtonGroup(options={"weights only": "weights", "weights + activations":
                                                "weights+activations"}, value=d.mode, width=CONTROL_WIDTH)
    kv = pn.widgets.RadioButtonGroup(options={"KV bf16": "bf16", "KV fp8": "fp8"}, value=d.kv_dtype,
                                     width=CONTROL_WIDTH)
    batch = pn.widgets.Select(label="Users decoding together", options=[1, 8, 64, 256], value=d.batch,
                              width=CONTROL_WIDTH)

    hist = ColumnDataSource(data={"left": [], "right": [], "w": [], "q": []})
    levels = ColumnDataSource(data={"x": [], "y0": [], "y1": []})
    wide = ColumnDataSource(data={"x": [], "y0": [], "y1": []})
    speed = ColumnDataSource(data={"name": [], "tps": [], "colour": [], "label": []})

    p_hist = plot("Weights before (grey) and after (orange) quantization", "weight value", "weights per bin",
                  width=600, height=300)
    w_bars = p_hist.quad(left="left", right="right", bottom=0, top="w", source=hist, fill_color=GREY,
                         fill_alpha=0.5, line_color=None)
    q_bars = p_hist.quad(left="left", right="right", bottom=0, top="q", source=hist, fill_color=ORANGE,
                         fill_alpha=0.8, line_color=None)
    first = p_hist.segment(x0="x", x1="x", y0="y0", y1="y1", source=levels, color=BLUE, line_width=1.5)
    widest = p_hist.segment(x0="x", x1="x", y0="y0", y1="y1", source=wide, color=VERMILION, line_width=1)
    inset_legend(p_hist, [("original", w_bars), ("quantized", q_bars), ("levels, first group", first),
                          ("levels, widest group", widest)])
    p_speed = plot("Decode speed per user", "tokens/s per user", "", width=600, height=220,
                   y_range=FactorRange(factors=[]))
    p_speed.hbar(y="name", right="tps", height=0.7, source=speed, fill_color="colour", line_color=None)
    p_speed.text(x="tps", y="name", text="label", source=speed, x_offset=4, text_baseline="middle",
                 text_font_size="10px")
    numbers, note = readout(), readout(width=860)

    def update() -> None:
        fmt = f"int{bits.value}" if kind.value == "int" else kind.value
        r = COMPUTE(PARAMS(fmt=fmt, granularity=granularity.value, group_size=group.value, outliers=outliers.value,
                           gpu=gpu.value, mode=mode.value, kv_dtype=kv.value, batch=batch.value))
        e = r.hist_edges
        hist.data = {"left": e[:-1], "right": e[1:], "w": r.hist_counts, "q": r.hist_counts_quantized}
        top = float(r.hist_counts.max())
        levels.data = {"x": r.levels_first_group, "y0": np.full(len(r.levels_first_group), -0.06 * top),
                       "y1": np.zeros(len(r.levels_first_group))}
        wide.data = {"x": r.levels_widest_group, "y0": np.full(len(r.levels_widest_group), -0.12 * top),
                     "y1": np.full(len(r.levels_widest_group), -0.06 * top)}
        p_hist.x_range.start, p_hist.x_range.end = float(e[0]), float(e[-1])
        names = [f"{n} ({b:.4g} bits, {m})" for n, b, m in zip(r.speed_names, r.speed_bits_per_weight,
                                                                  r.speed_math_dtype)]
        names[-1] = f"this: {r.format_name} ({r.speed_bits_per_weight[-1]:.4g} bits, {r.speed_math_dtype[-1]})"
        p_speed.y_range.factors = names[::-1]
        speed.data = {"name": names, "tps": r.speed_tokens_per_s_per_user,
                      "colour": [GREY] + [BLUE] * (len(names) - 2) + [ORANGE],
                      "label": [f"{t:,.0f}" for t in r.speed_tokens_per_s_per_user]}
        numbers.object = rows_table([
            ("format", r.format_name),
            ("bits per weight", f"{r.bits_per_weight:.3f} (scales included)"),
            ("MSE", f"{r.mse:.3g}"),
            ("SQNR", f"{r.sqnr_db:.1f} dB"),
            ("rounded to zero", f"{r.zero_share:.1%} of weights"),
            ("decode step", fmt_ms(r.speed_step_time_s[-1], 2)),
            ("against bf16", f"{r.speedup_vs_bf16:.2f}x faster"),
        ])
        extra = f", {len(r.outlier_columns)} input channels scaled x{d.outlier_scale:g}" if outliers.value else ""
        note.object = provenance(
            f"Demo matrix: {d.rows} x {d.cols} weights drawn from a Student-t with {d.tail_dof:g} degrees of "
            f"freedom and standard deviation {d.std:g} (seed {d.seed}; an assumed stand-in for a trained layer)"
            f"{extra}. Speed: {r.model_name} on {r.gpu_name}, {batch.value} user(s) at {d.context_tokens:,} tokens of "
            f"context, one decode step. {r.speed_note}")

    watch([kind, bits, granularity, group, outliers, gpu, mode, kv, batch], update)
    update()
    layout = pn.Column(
        pn.Row(pn.Column(kind, bits, granularity, group, outliers, gpu, mode, kv, batch, numbers,
                         width=CONTROL_WIDTH + 20),
               pn.Column(pn.pane.Bokeh(p_hist), pn.pane.Bokeh(p_speed))),
        note)
    return FigureView(FIGURE_ID, layout,
                      # bits and group size first: they act only on integer formats and group scales
                      controls={"bits": bits, "group": group, "granularity": granularity, "format": kind,
                                "outliers": outliers, "gpu": gpu, "mode": mode, "kv": kv, "batch": batch},
                      sources={"hist": hist, "levels": levels, "wide": wide, "speed": speed},
                      readouts={"numbers": numbers, "note": note}, plots=[p_hist, p_speed])
