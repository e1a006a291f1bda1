"""ch14-model-vs-measured: where the calibrated model and the plain roofline miss real kernels.

Every kernel timing shipped with a calibration (imported H100 and A100 profiles, the
recorded CPU trace) is drawn at its measured time against predicted / measured, for the
calibrated model and for the plain roofline at the same measured peaks. A ratio of 1 is
exact; the roofline's misses gather at the small kernels, where fixed costs dominate.

Controls: device, kernel kind. One call: sim.model_check.check_model. Shows the points,
the held-out (out-of-sample) errors per op kind from the calibration file, and the
all-reduce fit where the device has one.
"""
from __future__ import annotations

import math

import panel as pn
from bokeh.models import ColumnDataSource, HoverTool, Span

from sim.model_check import OP_NAMES, OPS, ModelCheckParams, check_model, device_choices
from widgets.base import (CONTROL_WIDTH, GREY, ORANGE, FigureView, details_table, inset_legend, plot, provenance,
                          readout, watch)

FIGURE_ID = "ch14-model-vs-measured"
TITLE = "Measured kernel times against the calibrated model and the plain roofline"
COMPUTE = check_model
PARAMS = ModelCheckParams
STATES = {"a100": {"device": "a100-80gb"}, "cpu-all-ops": {"device": "cpu-amd-epyc-1-thread", "op": "all"}}   # named states (widgets.state)


def _pct(x: float) -> str:
    return f"{x * 100:.0f}%" if x >= 0.1 else f"{x * 100:.1f}%"


def _errors_table(r) -> str:
    head = "<tr><th>op</th><th>n</th><th>model median / max</th><th>roofline median / max</th></tr>"
    body = "".join(f"<tr><th>{e.op}</th><td>{e.n:,}</td><td>{_pct(e.model_median)} / {_pct(e.model_max)}</td>"
                   f"<td>{_pct(e.roofline_median)} / {_pct(e.roofline_max)}</td></tr>" for e in r.heldout_errors)
    return (f'<p class="fig-note">Held out ({r.heldout_method}):</p>'
            f'<table class="fig-numbers">{head}{body}</table>')


def build() -> FigureView:
    d = PARAMS()
    device = pn.widgets.Select(label="Device the kernels ran on", options=device_choices(), value=d.device,
                               width=CONTROL_WIDTH)
    op = pn.widgets.Select(label="Kernels", options={OP_NAMES[k]: k for k in OPS}, value=d.op, width=CONTROL_WIDTH)

    points = ColumnDataSource(data={"measured_us": [], "model": [], "roofline": [], "alpha": [], "label": []})
    p = plot("Predicted / measured, per kernel", "measured time (µs, log scale)",
             "predicted / measured (log scale)", x_type="log", y_type="log", width=600, height=360)
    p.add_layout(Span(location=1, dimension="width", line_color="#444", line_dash="dashed", line_width=1))
    roof = p.scatter("measured_us", "roofline", source=points, size=6, marker="triangle", color=GREY,
                     fill_alpha="alpha", line_alpha=0.6)
    model = p.scatter("measured_us", "model", source=points, size=6, color=ORANGE, fill_alpha="alpha",
                      line_alpha=0.8)
    p.add_tools(HoverTool(renderers=[model, roof], tooltips=[("kernel", "@label"), ("measured", "@measured_us µs"),
                                                            ("model / measured", "@model{0.00}"),
                                                            ("roofline / measured", "@roofline{0.00}")]))
    inset_legend(p, [("calibrated model", model), ("plain roofline", roof)], location="top_right")
    numbers, points_note, note = readout(width=CONTROL_WIDTH + 200), readout(width=860), readout(width=860)

    def update() -> None:
        r = check_model(ModelCheckParams(device=device.value, op=op.value))
        points.data = {"measured_us": r.measured_s * 1e6, "model": r.model_ratio, "roofline": r.roofline_ratio,
                       "alpha": [0.9 if h or r.imported else 0.25 for h in r.heldout], "label": list(r.labels)}
        shown = (f"<p>{r.n_points} kernels shown; median error of the dots: model {_pct(r.shown_model_median)}, "
                 f"roofline {_pct(r.shown_roofline_median)}.</p>" if r.n_points else
                 f"<p>No {OP_NAMES[r.op]} among this device's shipped timings.</p>")
        comm = ("" if r.allreduce_latency_s is None else
                f"<p>All-reduce in one server: {r.allreduce_latency_s * 1e6:.0f} µs + bytes at "
                f"{r.allreduce_bus_bytes_per_s / 1e9:.0f} GB/s bus bandwidth; leave one GPU count out: "
                f"median {_pct(r.allreduce_median)}, max {_pct(r.allreduce_max)}.</p>")
        numbers.object = shown + _errors_table(r) + comm
        worst = sorted(range(r.n_points), key=lambda i: -abs(math.log(r.model_ratio[i])))
        points_note.object = details_table(
            "Every kernel shown, the model's largest error first",
            ("kernel", "measured (µs)", "model / measured", "roofline / measured", "prediction"),
            [(r.labels[i], f"{r.measured_s[i] * 1e6:,.1f}", f"{r.model_ratio[i]:.2f}", f"{r.roofline_ratio[i]:.2f}",
              "out of sample" if r.heldout[i] else "in sample") for i in worst])
        note.object = provenance(r.note)

    watch([device, op], update)
    update()
    layout = pn.Column(pn.Row(pn.Column(device, op, numbers, width=CONTROL_WIDTH + 220), pn.pane.Bokeh(p)),
                       points_note, note)
    return FigureView(FIGURE_ID, layout, controls={"device": device, "op": op}, sources={"points": points},
                      readouts={"numbers": numbers, "points_note": points_note, "note": note}, plots=[p])
