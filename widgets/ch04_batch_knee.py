"""ch04-batch-knee: why batching is nearly free until the knee.

A decode step reads every weight once, whatever the batch. Below the knee, adding
users adds FLOPs the tensor cores absorb without reading more bytes, so the step time
stays flat and total tokens/s grows with the batch. Past the knee the step is
compute-bound: time grows with the batch and per-user speed falls.

Controls: batch size (1..1024), GPU, model, and the context each user already holds.
One call: sim.batching.sweep_batch, whose result also carries the measured GEMM times of
one layer from the recorded traces, on the device they were recorded on, against the
calibrated model and the plain roofline (drawn below).
"""
from __future__ import annotations

import numpy as np
import panel as pn
from bokeh.core.properties import value
from bokeh.models import ColumnDataSource, Legend, LegendItem, Span

from sim import batching
from widgets.base import (BLUE, CONTROL_WIDTH, GREEN, GREY, ORANGE, VERMILION, FigureView, fmt_ms, gpu_select,
                          model_select, plot, provenance, readout, rows_table, watch)

FIGURE_ID = "ch04-batch-knee"
TITLE = "Decode step time and throughput against batch size"
COMPUTE = batching.sweep_batch
PARAMS = batching.BatchSweepParams
STATES = {  # named states (widgets.state), as the chapter uses them
    "batch-64": {"batch": 64},
    "h200-batch-64": {"gpu": "H200", "batch": 64},
    "long-context": {"batch": 64, "context": 32768}}
CONTEXTS = {"256 tokens": 256, "2,048 tokens": 2048, "8,192 tokens": 8192, "32,768 tokens": 32768}


def build() -> FigureView:
    batch = pn.widgets.IntSlider(label="Batch size (concurrent users)", start=1, end=1024, value=1,
                                 width=CONTROL_WIDTH)
    gpu, model = gpu_select(), model_select()
    context = pn.widgets.Select(label="Context per user", options=CONTEXTS, value=256, width=CONTROL_WIDTH)

    curve = ColumnDataSource(data={"batch": [], "step_ms": [], "total": [], "per_user": []})
    point = ColumnDataSource(data={"batch": [], "step_ms": [], "total": [], "per_user": []})
    knee = Span(location=1, dimension="height", line_dash="dashed", line_color="#888", line_width=1)

    p_time = plot("Decode step time", "batch size (log scale)", "step time (ms)", x_type="log",
                  width=300, height=300)
    p_time.line("batch", "step_ms", source=curve, line_width=2, color=BLUE)
    p_time.scatter("batch", "step_ms", source=point, size=9, color=ORANGE)
    p_time.add_layout(knee)

    p_rate = plot("Tokens per second", "batch size (log scale)", "tokens/s (log scale)", x_type="log",
                  y_type="log", width=300, height=300)
    total = p_rate.line("batch", "total", source=curve, line_width=2, color=GREEN)
    per_user = p_rate.line("batch", "per_user", source=curve, line_width=2, color=VERMILION)
    p_rate.scatter("batch", "total", source=point, size=8, color=GREEN)
    p_rate.scatter("batch", "per_user", source=point, size=8, color=VERMILION)
    p_rate.add_layout(Legend(items=[LegendItem(label="total", renderers=[total]),
                                    LegendItem(label="per user", renderers=[per_user])],
                             location="center_right", label_text_font_size="11px"), "center")
    numbers, note = readout(), readout(width=620)

    measured = ColumnDataSource(data={"tokens": [], "measured_ms": [], "low_ms": [], "high_ms": [],
                                      "model_ms": [], "roofline_ms": []})
    p_meas = plot("Measured", "tokens in the step (log scale)",
                  "one layer's 4 GEMMs (ms, log)", x_type="log", y_type="log", width=540, height=260)
    p_meas.segment("tokens", "low_ms", "tokens", "high_ms", source=measured, color=GREY)
    dots = p_meas.scatter("tokens", "measured_ms", source=measured, size=7, color=BLUE)
    fitted = p_meas.line("tokens", "model_ms", source=measured, line_width=2, color=ORANGE)
    plain = p_meas.line("tokens", "roofline_ms", source=measured, line_width=1.5, color=GREY, line_dash="dashed")
    dots_item = LegendItem(label="measured (quartiles)", renderers=[dots])
    p_meas.add_layout(Legend(items=[dots_item, LegendItem(label="calibrated model", renderers=[fitted]),
                                    LegendItem(label="plain roofline", renderers=[plain])],
                             location="top_left", label_text_font_size="11px"), "center")
    measured_note = readout(width=300)

    def update() -> None:
        r = COMPUTE(PARAMS(model=model.value, gpu=gpu.value, batch=batch.value, context_tokens=context.value))
        curve.data = {"batch": r.batch_grid, "step_ms": r.step_time_s * 1e3,
                      "total": r.tokens_per_s_total, "per_user": r.tokens_per_s_per_user}
        point.data = {"batch": [r.batch], "step_ms": [r.step_time_s_at_batch * 1e3],
                      "total": [r.tokens_per_s_total_at_batch], "per_user": [r.tokens_per_s_per_user_at_batch]}
        knee.location = r.knee_batch
        numbers.object = rows_table([
            ("step time", fmt_ms(r.step_time_s_at_batch, 2)),
            ("total", f"{r.tokens_per_s_total_at_batch:,.0f} tokens/s"),
            ("per user", f"{r.tokens_per_s_per_user_at_batch:,.1f} tokens/s"),
            ("GEMMs are", f"{r.bound_at_batch}-bound"),
            ("knee (dashed)", f"batch {r.knee_batch:,.0f}"),
        ])
        note.object = provenance(f"{r.model}, bf16 weights. {r.calibration_note}")
        m = r.measured
        if m is None:
            measured.data = {k: [] for k in measured.data}
        else:
            p_meas.title.text = f"Measured on {m.device}"
            spread = not np.any(np.isnan(m.measured_p25_s))    # imported profiles publish no quartiles
            low, high = (m.measured_p25_s, m.measured_p75_s) if spread else (m.measured_s, m.measured_s)
            dots_item.label = value("measured (quartiles)" if spread else "measured (medians)")
            measured.data = {"tokens": m.tokens, "measured_ms": m.measured_s * 1e3, "low_ms": low * 1e3,
                             "high_ms": high * 1e3, "model_ms": m.model_s * 1e3, "roofline_ms": m.roofline_s * 1e3}
        measured_note.object = provenance(r.measured_note)

    watch([batch, gpu, model, context], update)
    update()
    layout = pn.Column(
        pn.Row(pn.Column(batch, gpu, model, context, numbers, width=CONTROL_WIDTH + 20),
               pn.pane.Bokeh(p_time), pn.pane.Bokeh(p_rate)),
        note,
        pn.Row(pn.pane.Bokeh(p_meas), measured_note))
    return FigureView(FIGURE_ID, layout, controls={"batch": batch, "gpu": gpu, "model": model, "context": context},
                      sources={"curve": curve, "point": point, "measured": measured},
                      readouts={"numbers": numbers, "note": note, "measured_note": measured_note},
                      plots=[p_time, p_rate, p_meas])
