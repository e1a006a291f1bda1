"""ch04-batch-knee: why batching is nearly free until the knee.

A decode step reads every weight once, whatever the batch. Below the knee, adding
users adds FLOPs the tensor cores absorb without reading more bytes, so the step
time stays flat and total tokens/s grows with the batch. Past the knee the step is
compute-bound: time grows with the batch and per-user speed falls.

Controls: batch size (1..1024), GPU, model.
"""
from __future__ import annotations

import numpy as np
import panel as pn
from bokeh.models import ColumnDataSource, Span

from sim import calibration, hardware, models
from widgets.base import (BLUE, CONTROL_WIDTH, ORANGE, FigureView, plot, provenance, readout,
                          rows_table, watch)

FIGURE_ID = "ch04-batch-knee"
TITLE = "Decode step time and throughput against batch size"
BATCHES = np.unique(np.round(np.logspace(0, 10, 81, base=2)).astype(int))   # 1..1024


def _step_times_s(model_name: str, gpu_name: str, batches: np.ndarray) -> np.ndarray:
    gpu, model = hardware.get(gpu_name), models.get(model_name)
    cal = calibration.for_gpu(gpu)
    per_layer = np.array([sum(cal.gemm_time_s(int(b), n, k) for k, n in model.linear_shapes().values())
                          for b in batches])
    return per_layer * model.num_layers


def build() -> FigureView:
    batch = pn.widgets.IntSlider(label="Batch size (concurrent users)", start=1, end=1024, value=1,
                                 width=CONTROL_WIDTH)
    gpu = pn.widgets.Select(label="GPU", options=hardware.names(), value="H100-SXM", width=CONTROL_WIDTH)
    model = pn.widgets.Select(label="Model", options=models.names(), value="llama-3.1-8b",
                              width=CONTROL_WIDTH)
    curve = ColumnDataSource(data={"batch": [], "step_ms": [], "tokens_per_s": []})
    point = ColumnDataSource(data={"batch": [], "step_ms": [], "tokens_per_s": []})

    p_time = plot("Decode step time", "batch size", "step time (ms)", x_type="log")
    p_time.line("batch", "step_ms", source=curve, line_width=2, color=BLUE)
    p_time.scatter("batch", "step_ms", source=point, size=9, color=ORANGE)
    knee = Span(location=1, dimension="height", line_dash="dashed", line_color="#999")
    p_time.add_layout(knee)
    numbers, note = readout(), readout()

    def update() -> None:
        t = _step_times_s(model.value, gpu.value, BATCHES) * 1e3
        curve.data = {"batch": BATCHES, "step_ms": t, "tokens_per_s": BATCHES / t * 1e3}
        t_b = _step_times_s(model.value, gpu.value, np.array([batch.value]))[0] * 1e3
        point.data = {"batch": [batch.value], "step_ms": [t_b], "tokens_per_s": [batch.value / t_b * 1e3]}
        numbers.object = rows_table([("step time", f"{t_b:.2f} ms"),
                                     ("total", f"{batch.value / t_b * 1e3:,.0f} tokens/s"),
                                     ("per user", f"{1e3 / t_b:,.1f} tokens/s")])
        note.object = provenance(calibration.for_gpu(hardware.get(gpu.value)).note)

    watch([batch, gpu, model], update)
    update()
    layout = pn.Row(pn.Column(batch, gpu, model, numbers, width=CONTROL_WIDTH + 20),
                    pn.Column(pn.pane.Bokeh(p_time), note))
    return FigureView(FIGURE_ID, layout, controls={"batch": batch, "gpu": gpu, "model": model},
                      sources={"curve": curve, "point": point},
                      readouts={"numbers": numbers, "note": note}, plots=[p_time])
