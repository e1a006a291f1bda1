"""ch03-roofline: where the operations of an LLM sit on the roofline, and what was measured.

A kernel that does I FLOPs per byte it moves through memory can run no faster than
min(peak FLOP/s, I x bandwidth): the sloped part of the roof is the memory limit, the flat
part the compute limit, and they meet at the ridge. Prefill GEMMs reuse each weight across
thousands of tokens and sit far right, under the flat roof. Decode GEMMs at batch 1 do
about one multiply-add per weight they read and sit far left; a batch of B users reuses
each weight B times and drags them right (the batch slider). Decode attention reads each
user's own KV cache, so batching does not move it, and elementwise kernels (norms, RoPE,
SiLU) do almost no arithmetic per byte.

Measured kernels (recorded traces, or kernel timings imported from published profiles)
are drawn as dots, only on the device they were measured on. A recorded device outside
the catalogue (a CPU) appears in the device list as its own choice; its roof is the one
fitted to its own measurements (no spec sheet). When the chosen GPU has no timings, the
figure says so.

Controls: device (catalogue GPUs and recorded devices), dtype, model, decode batch B,
prefill length. One call per update: sim.roofline.roofline_chart for a catalogue GPU (its
result carries the GPU's own measured kernels, if any), sim.roofline.measured_roofline
for a recorded device outside the catalogue.
"""
from __future__ import annotations

import panel as pn
from bokeh.core.properties import value
from bokeh.models import ColumnDataSource, Legend, LegendItem, Span

from sim import hardware, roofline
from widgets.base import (BLUE, CONTROL_WIDTH, GREEN, GREY, ORANGE, PURPLE, SKY, VERMILION, FigureView, model_select,
                          plot, provenance, readout, rows_table, watch)

FIGURE_ID = "ch03-roofline"
TITLE = "The roofline, with the operations of an LLM placed on it"
COMPUTE = roofline.roofline_chart
PARAMS = roofline.RooflineChartParams
STATES = {"batch-1": {"batch": 1}, "fp8": {"dtype": "fp8"}}   # named states (widgets.state), as the chapter uses them

DTYPE_ORDER = ("bf16", "fp8", "int8", "fp4", "fp32")     # fp16 has the same roof as bf16 on these chips
GROUPS = {                                                # RooflineChartResult.op_groups -> legend, colour
    "prefill GEMM": ("prefill GEMMs", BLUE),
    "decode GEMM, batch 1": ("decode GEMMs, batch 1", VERMILION),
    "decode GEMM, batch B": ("decode GEMMs, batch B", ORANGE),
    "attention (decode)": ("decode attention", PURPLE),
    "elementwise": ("elementwise (norms, RoPE, SiLU)", GREEN),
}
EFFECTIVE_LABEL = {"spec-sheet": "effective roof (assumed: 80% BW, 60% FLOP/s)",
                   "trace": "effective roof (fitted to its kernel timings)",
                   "carried-over": "effective roof (carried over from kernel timings)"}
RECORDED = "recorded:"                                    # device values for recorded devices: "recorded:<slug>"


def _dtypes_of(device: str, recorded: dict) -> list[str]:
    if device.startswith(RECORDED):
        have = recorded[device].calibration.flops_per_s
    else:
        have = hardware.get(device).dense_flops
    return [d for d in DTYPE_ORDER if d in have]


def _num(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def _tflops(x) -> list[float]:
    return [float(v) / 1e12 for v in x]


def build() -> FigureView:
    # recorded devices outside the catalogue (a CPU, an uncatalogued GPU) are choices of their own
    recorded = {f"{RECORDED}{d.slug}": d for key, d in roofline.measured_devices() if key is None}
    options = {hardware.get(n).display_name: n for n in hardware.names()}
    options.update({f"measured: {d.name}" + (" (not a GPU)" if d.device_type == "cpu" else ""): key
                    for key, d in recorded.items()})
    device = pn.widgets.Select(label="Device", options=options, value="H100-SXM", width=CONTROL_WIDTH)
    dtype = pn.widgets.Select(label="Number format (tensor-core dtype)", options=_dtypes_of("H100-SXM", recorded),
                              value="bf16", width=CONTROL_WIDTH)
    model = model_select()
    batch = pn.widgets.IntSlider(label="Decode batch B (users)", start=1, end=1024, value=64, width=CONTROL_WIDTH)
    prompt = pn.widgets.IntSlider(label="Prefill length (tokens)", start=128, end=16384, step=128, value=2048,
                                  width=CONTROL_WIDTH)

    roof_peak = ColumnDataSource(data={"x": [], "y": []})
    roof_eff = ColumnDataSource(data={"x": [], "y": []})
    ops = {g: ColumnDataSource(data={"x": [], "y": [], "label": []}) for g in GROUPS}
    measured = ColumnDataSource(data={"x": [], "y": [], "model_y": [], "label": [], "kind": []})
    notice = ColumnDataSource(data={"x": [], "y": [], "text": []})     # "no trace of this GPU", in the plot
    ridge = Span(location=1, dimension="height", line_dash="dashed", line_color="#888", line_width=1)

    p = plot("", "arithmetic intensity (FLOP per byte, log scale)", "attainable TFLOP/s (log scale)",
             x_type="log", y_type="log", width=600, height=420)
    peak_line = p.line("x", "y", source=roof_peak, line_width=2, color="#333")
    eff_line = p.line("x", "y", source=roof_eff, line_width=2, color=SKY, line_dash="dashed")
    p.add_layout(ridge)
    eff_item = LegendItem(label="effective roof", renderers=[eff_line])
    peak_item = LegendItem(label="peak roof (spec sheet)", renderers=[peak_line])
    items = [peak_item, eff_item]
    for g, src in ops.items():
        r = p.scatter("x", "y", source=src, size=9, color=GROUPS[g][1], alpha=0.85, line_color="white")
        items.append(LegendItem(label=GROUPS[g][0], renderers=[r]))
    p.segment(x0="x", y0="y", x1="x", y1="model_y", source=measured, line_color=GREY, line_width=1)
    dots = p.scatter("x", "y", source=measured, size=6, color="#222", alpha=0.75)
    dots_item = LegendItem(label="measured kernels (line: to model)", renderers=[dots])
    items.append(dots_item)
    gpu_items = items[:1] + items[2:-1]          # what a recorded device's view has nothing of
    p.text(x="x", y="y", text="text", source=notice, text_font_size="11px", text_color=VERMILION,
           text_baseline="top")
    p.add_layout(Legend(items=items, location="bottom_right", label_text_font_size="10px",
                        background_fill_alpha=0.8, spacing=0, padding=4), "center")

    numbers, trace_note, note = readout(), readout(width=600), readout(width=860)

    def show_measured(m) -> str:
        """Fill the measured dots from a MeasuredRooflineResult; return a line about them."""
        measured.data = {"x": m.point_intensity_flop_per_byte, "y": _tflops(m.point_measured_flops_per_s),
                         "model_y": _tflops(m.point_model_flops_per_s), "label": m.point_labels,
                         "kind": m.point_kinds}
        return (f"Dots: {len(m.point_labels)} {m.dtype} kernels (GEMMs, attention) measured on {m.device}; "
                f"a grey line joins each to the calibrated model's prediction. {m.memory_only_points} copy and "
                f"elementwise kernels do no FLOPs, so they cannot sit on this chart. {m.caption}.")

    busy = [False]

    def update() -> None:
        if busy[0]:
            return
        busy[0] = True
        try:
            _update()
        finally:
            busy[0] = False

    def _update() -> None:
        choices = _dtypes_of(device.value, recorded)
        if list(dtype.options) != choices:
            dtype.options = choices
        if dtype.value not in choices:
            dtype.value = choices[0]
        is_recorded = device.value.startswith(RECORDED)
        for w in (model, batch, prompt):
            w.disabled = is_recorded
        for item in gpu_items:                  # the legend lists only what is drawn
            item.visible = not is_recorded
        if is_recorded:
            m = roofline.measured_roofline(roofline.MeasuredRooflineParams(device=recorded[device.value].slug,
                                                                            dtype=dtype.value))
            roof_peak.data = {"x": [], "y": []}
            roof_eff.data = {"x": m.intensity_flop_per_byte, "y": _tflops(m.fitted_flops_per_s)}
            for src in ops.values():
                src.data = {"x": [], "y": [], "label": []}
            ridge.location = m.ridge_flop_per_byte
            eff_item.label = value("roof fitted to its measurements")
            dots_item.visible = True
            p.title.text = f"{m.device}, {m.dtype}: measured kernels"
            notice.data = ({"x": [m.intensity_flop_per_byte[0] * 1.3], "y": [m.compute_flops_per_s / 1e12 * 3],
                            "text": ["not a GPU: its own measured roof"]} if m.device_type == "cpu"
                           else {"x": [], "y": [], "text": []})
            numbers.object = rows_table([
                ("fitted compute", f"{m.compute_flops_per_s / 1e12:,.3g} TFLOP/s"),
                ("fitted bandwidth", f"{m.bandwidth_bytes_per_s / 1e9:,.3g} GB/s"),
                ("ridge (dashed)", f"{m.ridge_flop_per_byte:,.1f} FLOP/byte"),
                ("kernels drawn", f"{len(m.point_labels)}"),
            ])
            kind = "a CPU, not a GPU" if m.device_type == "cpu" else "a recorded GPU"
            trace_note.object = (f"<p><b>Recorded device ({kind}).</b> The dashed line is the roof fitted to its "
                                 f"own measurements (bandwidth from its copy sweep, compute from its fastest "
                                 f"square GEMM); no spec sheet is involved. "
                                 + show_measured(m) + " The LLM's operations are placed on the "
                                 "catalogue GPUs: pick one to see them (model, batch and prefill apply there).</p>")
            note.object = provenance(m.caption)
            return
        params = PARAMS(gpu=device.value, dtype=dtype.value, model=model.value, batch=batch.value,
                        prompt_tokens=prompt.value)
        r = COMPUTE(params)
        eff_item.label = value(EFFECTIVE_LABEL[r.calibration_source])
        roof_peak.data = {"x": r.intensity_flop_per_byte, "y": _tflops(r.peak_flops_per_s)}
        roof_eff.data = {"x": r.intensity_flop_per_byte, "y": _tflops(r.effective_flops_per_s)}
        for g, src in ops.items():
            idx = [i for i, grp in enumerate(r.op_groups) if grp == g]
            src.data = {"x": [float(r.op_intensity_flop_per_byte[i]) for i in idx],
                        "y": [float(r.op_achieved_flops_per_s[i]) / 1e12 for i in idx],
                        "label": [r.op_labels[i] for i in idx]}
        ridge.location = r.ridge_flop_per_byte

        def span(group: str) -> str:
            xs = [x for x, grp in zip(r.op_intensity_flop_per_byte, r.op_groups) if grp == group]
            bounds = sorted({b for b, grp in zip(r.op_bound, r.op_groups) if grp == group})
            lo, hi = min(xs), max(xs)
            where = _num(lo) if _num(lo) == _num(hi) else f"{_num(lo)}-{_num(hi)}"
            return f"{where} ({'/'.join(bounds)})"

        numbers.object = rows_table([
            ("peak", f"{r.peak_compute_flops_per_s / 1e12:,.0f} TFLOP/s"),
            ("bandwidth", f"{r.peak_bandwidth_bytes_per_s / 1e12:,.3g} TB/s"),
            ("ridge (dashed)", f"{r.ridge_flop_per_byte:,.0f} FLOP/byte"),
            ("effective ridge", f"{r.effective_ridge_flop_per_byte:,.0f} FLOP/byte"),
            ("prefill GEMMs", span("prefill GEMM")),
            ("decode, batch 1", span("decode GEMM, batch 1")),
            (f"decode, B = {batch.value}", span("decode GEMM, batch B")),
            ("decode attention", span("attention (decode)")),
            ("elementwise", span("elementwise")),
        ])
        if r.measured is not None:
            p.title.text = f"{r.gpu}, {r.dtype}: model and measured kernels"
            notice.data = {"x": [], "y": [], "text": []}
            trace_note.object = "<p>" + show_measured(r.measured) + "</p>"
            dots_item.visible = True
        else:
            measured.data = {"x": [], "y": [], "model_y": [], "label": [], "kind": []}
            dots_item.visible = False
            why = r.no_measured_reason
            p.title.text = f"{r.gpu}, {r.dtype}: model only"
            notice.data = {"x": [r.intensity_flop_per_byte[0] * 1.3], "y": [r.peak_compute_flops_per_s / 1e12],
                           "text": [f"No measured points: {why}"]}
            where = (f" Measured kernels exist for: {', '.join(r.measured_on)}; pick one in the device list to "
                     f"see them on its own roof." if r.measured_on else " No device has a recorded trace yet.")
            trace_note.object = (f"<p><b>No measured points on this chart:</b> {why} ({r.gpu}). The points "
                                 f"are the model's estimates and the dashed line is the model's effective roof."
                                 f"{where}</p>")
        note.object = provenance(f"{r.model}; operation points at the time the model "
                                 f"gives them (launch overhead included), {prompt.value}-token prefill, decode "
                                 f"with a {params.context_tokens:,}-token cache. {r.calibration_note}")

    watch([device, dtype, model, batch, prompt], update)
    update()
    layout = pn.Column(
        pn.Row(pn.Column(device, dtype, model, batch, prompt, numbers, width=CONTROL_WIDTH + 20),
               pn.Column(pn.pane.Bokeh(p), trace_note)),
        note)
    # device last: the LLM controls apply to catalogue GPUs only
    return FigureView(FIGURE_ID, layout,
                      controls={"dtype": dtype, "model": model, "batch": batch, "prompt": prompt, "device": device},
                      sources={"roof_peak": roof_peak, "roof_effective": roof_eff,
                               **{f"ops_{i}": s for i, s in enumerate(ops.values())}, "measured": measured,
                               "notice": notice},
                      readouts={"numbers": numbers, "trace": trace_note, "note": note}, plots=[p])
