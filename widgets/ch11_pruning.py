"""ch11-pruning: what 2:4 sparsity and 4-bit weights should buy one user, and what was measured.

Four ways to store the blocks' linear weights (dense bf16, 4-bit with group scales, 2:4
sparse bf16, 2:4 sparse + 4-bit) each cut the bytes a decode step reads. Only those
weights shrink; the embedding and output head, the KV cache, the activations, the
kernels' time beyond bytes / bandwidth and whatever the engine spends per step outside
the GPU do not, so the step gains less than the weights shrank, and a measured gain
(R23, 2:4 + 4-bit Llama 3.1 8B) less still.

Controls: GPU, context of the one user, 4-bit group size, CUDA graphs, assumed
engine overhead per step. One call: sim.pruning.predict_pruning_speedup.
Shows: the step time of each variant stacked by part; the speedup the linear weights'
bytes predict, the step's bytes, the modelled step, and the measured range.
"""
from __future__ import annotations

import numpy as np
import panel as pn
from bokeh.models import ColumnDataSource, FactorRange, Range1d

from sim.pruning import PruningParams, predict_pruning_speedup
from widgets.base import (BLUE, CONTROL_WIDTH, GREEN, GREY, ORANGE, PURPLE, SKY, VERMILION, YELLOW, FigureView,
                          fmt_ms, gpu_select, inset_legend, plot, provenance, readout,
                          rows_table, watch)

FIGURE_ID = "ch11-pruning"
TITLE = "2:4 sparsity and 4-bit weights: the speedup the bytes predict and the one measured"
COMPUTE = predict_pruning_speedup
PARAMS = PruningParams
STATES = {"h100": {"gpu": "H100-SXM"}, "engine-overhead": {"engine": 1.5}}   # named states (widgets.state)
PARTS = (("linear weights", "linear", BLUE), ("head + embedding", "head", SKY), ("KV cache", "kv", GREEN),
         ("activations", "act", YELLOW), ("kernels beyond bytes", "kern", GREY), ("engine per step", "eng", PURPLE))
KINDS = (("linear weight bytes", ORANGE), ("all step bytes", VERMILION), ("modelled step", BLUE))
MEASURED = "measured range, R23"


def build() -> FigureView:
    d = PARAMS()
    gpu = gpu_select(d.gpu)
    context = pn.widgets.Select(label="Context of the one user", options={f"{c:,} tokens": c for c in
                                (256, 1024, 4096, 16384, 65536)}, value=d.context_tokens, width=CONTROL_WIDTH)
    group = pn.widgets.Select(label="4-bit group size", options=[32, 64, 128], value=d.quant_group_size,
                              width=CONTROL_WIDTH)
    graphs = pn.widgets.Checkbox(label="CUDA graphs (one launch per step)", value=d.cuda_graphs, width=CONTROL_WIDTH)
    engine = pn.widgets.FloatSlider(label="Engine overhead per step (ms, assumed)", start=0.0, end=5.0, step=0.25,
                                    value=d.engine_overhead_s * 1e3, width=CONTROL_WIDTH)

    stack = [ColumnDataSource(data={"variant": [], "left": [], "right": []}) for _ in PARTS]
    bars = [ColumnDataSource(data={"x": [], "speedup": [], "label": []}) for _ in KINDS]
    band = ColumnDataSource(data={"x": [], "bottom": [], "top": []})

    p_stack = plot("Decode step of one user, by part", "ms per step", "", width=600, height=230,
                   y_range=FactorRange(factors=[]))
    segments = [p_stack.hbar(y="variant", left="left", right="right", height=0.6, source=s, fill_color=c,
                             line_color="white") for s, (_, _, c) in zip(stack, PARTS)]
    inset_legend(p_stack, [(n, r) for (n, _, _), r in zip(PARTS, segments)], location="bottom_right")
    p_speed = plot("Speedup over dense bf16", "", "x faster", width=600, height=250,
                   x_range=FactorRange(factors=[]), y_range=Range1d(0, 6))
    measured = p_speed.vbar(x="x", bottom="bottom", top="top", width=0.8, source=band, fill_color=GREY,
                            fill_alpha=0.4, line_color=GREY)
    kinds = [p_speed.vbar(x="x", top="speedup", width=0.8, source=s, line_color=None, fill_color=c)
             for s, (_, c) in zip(bars, KINDS)]
    for s in bars:
        p_speed.text(x="x", y="speedup", text="label", source=s, text_align="center", y_offset=-2,
                     text_font_size="10px")
    p_speed.xaxis.major_label_text_font_size = "0px"
    inset_legend(p_speed, [(k, r) for (k, _), r in zip(KINDS, kinds)] + [(MEASURED, measured)], location="top_left")
    numbers, note = readout(), readout(width=860)

    def update() -> None:
        r = COMPUTE(PARAMS(gpu=gpu.value, context_tokens=context.value,
                           quant_group_size=group.value, cuda_graphs=graphs.value, engine_overhead_s=engine.value / 1e3))
        parts = (r.linear_weight_time_s, r.head_and_embedding_time_s, r.kv_time_s, r.activation_time_s,
                 r.overhead_time_s, r.engine_overhead_s)
        p_stack.y_range.factors = r.variants[::-1]
        edges = np.cumsum([np.zeros(len(r.variants)), *parts], axis=0) * 1e3        # (parts + 1, variants) in ms
        for j, src in enumerate(stack):
            src.data = {"variant": r.variants, "left": edges[j], "right": edges[j + 1]}
        lo, hi = r.measured_speedup_range
        p_speed.x_range.factors = [(v, k) for v in r.variants[1:] for k, _ in KINDS] + [(r.measured_variant, MEASURED)]
        for src, (kind, _), s in zip(bars, KINDS, (r.weights_only_speedup, r.bytes_speedup, r.predicted_speedup)):
            src.data = {"x": [(v, kind) for v in r.variants[1:]], "speedup": s[1:],
                        "label": [f"{x:.2f}" for x in s[1:]]}
        band.data = {"x": [(r.measured_variant, MEASURED)], "bottom": [lo], "top": [hi]}
        i = r.variants.index(r.measured_variant)
        numbers.object = rows_table(
            [(f"{v}: step", f"{fmt_ms(t, 2)} ({s:.2f}x)") for v, t, s in zip(r.variants, r.step_time_s,
                                                                             r.predicted_speedup)]
            + [(f"{r.measured_variant}, measured", f"{lo:.1f}-{hi:.1f}x faster"),
               ("engine overhead that gives it", f"{fmt_ms(r.overhead_to_match_s[0], 1)} to "
                                                  f"{fmt_ms(r.overhead_to_match_s[1], 1)} per step"),
               ("bytes alone (linear weights)", f"{r.weights_only_speedup[i]:.2f}x")])
        note.object = provenance(
            f"{r.model_name} on {r.gpu_name}, one user, {context.value:,} tokens of context. Stored bytes per weight of "
            f"the blocks' linear layers: {', '.join(f'{v} {b:.4g}' for v, b in zip(r.variants, r.bytes_per_weight))}"
            f" (4-bit: fp16 scale per {group.value}; 2:4: a 2-bit index per kept value). Embedding and head stay bf16. "
            f"Parts: bytes / calibrated bandwidth; 'kernels beyond bytes' is the modelled kernel time beyond that; "
            f"'engine per step' is the assumption set by the slider. Measured: R23, 2:4 + 4-bit Llama 3.1 8B, one "
            f"user, on A5000, A6000 and A100 GPUs. {r.calibration_note}")

    watch([gpu, context, group, graphs, engine], update)
    update()
    layout = pn.Column(
        pn.Row(pn.Column(gpu, context, group, graphs, engine, numbers, width=CONTROL_WIDTH + 20),
               pn.Column(pn.pane.Bokeh(p_stack), pn.pane.Bokeh(p_speed))),
        note)
    return FigureView(FIGURE_ID, layout,
                      controls={"gpu": gpu, "context": context, "group": group, "graphs": graphs,
                                "engine": engine},
                      sources={"band": band, **{f"stack-{k}": s for (_, k, _), s in zip(PARTS, stack)},
                               **{f"bars{i}": s for i, s in enumerate(bars)}},
                      readouts={"numbers": numbers, "note": note}, plots=[p_stack, p_speed])
