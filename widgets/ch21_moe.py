"""ch21-moe: a mixture-of-experts model at decode, as the batch grows.

For Mixtral 8x7B, Qwen3-235B-A22B or DeepSeek-V3 in bf16 or fp8 on a GPU: the weight bytes
one decode step reads against the tokens in the step (the routed experts it touches grow
with the batch), beside a dense model of the same active parameters and the whole model;
the FLOP per byte of the experts' matmuls against the GPU's ridge (where the step turns
compute-bound); and under expert parallelism over n GPUs, each GPU's share of the routed
tokens when some experts are hotter than others (Zipf skew), with memory per GPU and the
all-to-all a step costs.

Controls: model, GPU, format, skew, EP GPUs, batch. One call: sim.moe.moe_decode.
"""
from __future__ import annotations

import math

import panel as pn
from bokeh.models import ColumnDataSource, Legend, LegendItem, Span

from sim import moe
from widgets.base import (BLUE, CONTROL_WIDTH, GREY, ORANGE, VERMILION, FigureView, fmt_gib, fmt_ms, gpu_select,
                          label_ticks, plot, provenance, readout, rows_table, tokens_label, watch)

FIGURE_ID = "ch21-moe"
TITLE = "Mixture of experts at decode: bytes, intensity and the busiest GPU"
COMPUTE = moe.moe_decode
PARAMS = moe.MoeParams
STATES = {  # named states (widgets.state), as the chapter uses them
    "mixtral": {"model": "mixtral-8x7b", "ep": 8},
    "hot-experts": {"skew": 1.0},
    "one-user": {"batch": 1},
}
BATCHES = [2 ** k for k in range(0, 17)]
SKEWS = {"uniform (0)": 0.0, "mild (0.5)": 0.5, "hot experts (1)": 1.0, "very hot (1.5)": 1.5}


def build() -> FigureView:
    d = PARAMS()
    model = pn.widgets.Select(label="Model", options={m.display_name: k for k, m in moe.MOE_MODELS.items()},
                              value=d.model, width=CONTROL_WIDTH)
    gpu = gpu_select(d.gpu, names=list(moe.GPUS))
    weights = pn.widgets.RadioButtonGroup(options={"bf16": "bf16", "fp8": "fp8"}, value=d.weights,
                                          width=CONTROL_WIDTH)
    skew = pn.widgets.Select(label="Routing skew (Zipf exponent)", options=SKEWS, value=d.skew, width=CONTROL_WIDTH)
    ep = pn.widgets.Select(label="Expert parallelism over (GPUs)", options={str(n): n for n in moe.EP_GPUS},
                           value=d.ep_gpus, width=CONTROL_WIDTH)
    batch = pn.widgets.Select(label="Tokens in the step (all GPUs)", options={f"{b:,}": b for b in BATCHES},
                              value=d.batch, width=CONTROL_WIDTH)

    curves = ColumnDataSource(data={"batch": [], "moe": [], "dense": [], "all": [], "moe_i": [], "dense_i": []})
    gpus = ColumnDataSource(data={"gpu": [], "load": [], "colour": []})
    here = [Span(location=d.batch, dimension="height", line_color="#888", line_width=1) for _ in range(2)]
    ridge = Span(location=0, dimension="width", line_color=VERMILION, line_width=2)
    turn = [Span(location=1, dimension="height", line_color=c, line_width=1, line_dash="dotted") for c in (BLUE, ORANGE)]

    pb = plot("Weight bytes a decode step reads", "tokens in the step (log)", "GB (10^9 bytes)", width=300,
              height=300, x_type="log")
    lines = [pb.line("batch", k, source=curves, line_width=w, color=c, line_dash=dash)
             for k, w, c, dash in (("moe", 3, BLUE, "solid"), ("dense", 2, ORANGE, "dashed"), ("all", 2, GREY, "dotted"))]
    pb.add_layout(Legend(items=[LegendItem(label=t, renderers=[r]) for t, r in
                                zip(("MoE", "dense, same active", "every weight"), lines)],
                         orientation="horizontal", label_text_font_size="10px", padding=2, margin=2, spacing=4), "above")
    pi = plot("FLOP per weight byte, MLP matmuls (red: ridge)", "tokens in the step (log)", "FLOP/byte (log)", width=300,
              height=300, x_type="log", y_type="log")
    li = [pi.line("batch", k, source=curves, line_width=w, color=c, line_dash=dash)
          for k, w, c, dash in (("moe_i", 3, BLUE, "solid"), ("dense_i", 2, ORANGE, "dashed"))]
    pi.add_layout(Legend(items=[LegendItem(label=t, renderers=[r]) for t, r in
                                zip(("routed experts", "dense"), li)],
                         orientation="horizontal", label_text_font_size="10px", padding=2, margin=2, spacing=4), "above")
    for p, h in zip((pb, pi), here):
        p.add_layout(h)
        label_ticks(p.xaxis, {b: tokens_label(b) for b in BATCHES[::4]})
    pi.add_layout(ridge)
    for s in turn:
        pi.add_layout(s)
    pg = plot("Routed tokens per GPU (EP), over the mean (red: busiest)", "GPU", "x mean", width=300, height=300)
    pg.vbar(x="gpu", top="load", width=0.8, source=gpus, fill_color="colour", line_color=None)
    pg.add_layout(Span(location=1, dimension="width", line_color=GREY, line_width=1))
    pg.y_range.start = 0

    numbers, note = readout(width=880), readout(width=880)

    def update() -> None:
        try:
            r = COMPUTE(PARAMS(model=model.value, gpu=gpu.value, weights=weights.value, skew=skew.value,
                               ep_gpus=ep.value, batch=batch.value))
        except ValueError as exc:          # a combination the sim refuses: say so, keep the plots as they were
            numbers.object = f'<p class="fig-warning">Not computed: {exc}.</p>'
            return
        curves.data = {"batch": r.batches, "moe": r.moe_step_bytes / 1e9,
                       "dense": [r.dense_step_bytes / 1e9] * len(r.batches),
                       "all": [r.all_weight_bytes / 1e9] * len(r.batches),
                       "moe_i": r.moe_intensity, "dense_i": r.dense_intensity}
        gpus.data = {"gpu": list(range(len(r.gpu_load))), "load": r.gpu_load,
                     "colour": [VERMILION if x == r.busiest_gpu_load > 1 + 1e-9 else BLUE for x in r.gpu_load]}
        for h in here:
            h.location = batch.value
        ridge.location = r.ridge
        for s, x in zip(turn, (r.compute_bound_batch_moe, r.compute_bound_batch_dense)):
            s.location, s.visible = (x, True) if math.isfinite(x) else (1, False)

        def turns(x: float) -> str:
            return f"{x:,.0f} tokens" if math.isfinite(x) else f"past {moe.BATCH_MAX:,} tokens"
        a2a = "; ".join(f"{name} {fmt_ms(s, 2)}" for name, s in r.a2a_step_s.items())
        numbers.object = rows_table([
            ("parameters", f"{r.total_params / 1e9:,.1f} B stored, {r.active_params / 1e9:,.1f} B active a token"),
            (f"at {batch.value:,} tokens", f"{r.touched_at_batch:,.1f} routed experts read a layer; "
                                           f"{r.step_bytes_at_batch / 1e9:,.1f} GB of weights a step"),
            ("compute-bound from", f"experts {turns(r.compute_bound_batch_moe)}; dense "
                                   f"{turns(r.compute_bound_batch_dense)} (ridge {r.ridge:,.0f} FLOP/byte)"),
            (f"weights per GPU on {ep.value}", f"TP {fmt_gib(r.tp_bytes_per_gpu)}; EP {fmt_gib(r.ep_bytes_per_gpu)} "
                                               f"(the GPU has {fmt_gib(r.gpu_memory_bytes)})"),
            ("all-to-all a token and layer", f"dispatch {r.dispatch_bytes_per_token_layer / 1e3:,.1f} kB, "
                                             f"combine {r.combine_bytes_per_token_layer / 1e3:,.1f} kB"),
            ("both, a step, all MoE layers", a2a),
            ("busiest GPU", f"{r.busiest_gpu_load:,.2f} x the mean share of routed tokens"),
        ])
        note.object = provenance(
            f"{r.note} Expert e sits on GPU e mod {ep.value}, no redundant copies. EP keeps everything but the "
            f"routed experts on every GPU (data-parallel attention); TP splits every weight evenly. All-to-all: the "
            f"copies of a token bound for other GPUs, dispatched in the weights' format and combined in bf16, at "
            f"each link's line rate per direction with no overlap: lower bounds. Ridge: the datasheet's dense "
            f"{'fp8' if weights.value == 'fp8' else 'bf16'} tensor rate over its memory bandwidth.")

    def fit_ep(_event) -> None:
        """A model with too few routed experts for the EP chosen: the most GPUs it can spread them over."""
        m = moe.MOE_MODELS[model.value]
        if not m.spreads_over(ep.value):
            ep.value = max((n for n in moe.EP_GPUS if m.spreads_over(n)), default=ep.value)

    model.param.watch(fit_ep, "value")      # before update's watcher: the update then sees both changes
    watch([model, gpu, weights, skew, ep, batch], update)
    update()
    layout = pn.Column(
        pn.Row(pn.Column(model, gpu, weights, skew, ep, batch, width=CONTROL_WIDTH + 20),
               pn.Column(pn.Row(*(pn.pane.Bokeh(p) for p in (pb, pi, pg))))),
        numbers, note)
    return FigureView(FIGURE_ID, layout,
                      controls={"model": model, "gpu": gpu, "weights": weights, "skew": skew, "ep": ep,
                                "batch": batch},
                      sources={"curves": curves, "gpus": gpus}, readouts={"numbers": numbers, "note": note},
                      plots=[pb, pi, pg])
