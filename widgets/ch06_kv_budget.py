"""ch06-kv-budget: how many conversations fit, and what their cache does to decode speed.

What the engine may use of the GPU's memory, minus the weights and a reserve for
activations and workspaces, is the KV budget. At a
given context each sequence needs a fixed number of cache blocks, so the budget sets how
many sequences can run at once. Every decode step reads all the weights once and every
running sequence's cache, so as the batch grows the cache reads catch up with the weight
reads and the step time climbs with the batch instead of staying flat.

Controls: GPU, model, context per sequence, share of GPU memory the engine may use, KV
dtype (bf16/fp8). One call: sim.kv.kv_budget.
Shows: the memory split (weights, KV budget, the rest), bytes read per decode step
(weights vs cache) and the step time, both against the number of sequences up to the
number that fits.
"""
from __future__ import annotations

import numpy as np
import panel as pn
from bokeh.models import ColumnDataSource, Legend, LegendItem, Range1d, Span

from sim import kv
from sim.batch import Precision
from widgets.base import (BLUE, CONTROL_WIDTH, GREY, ORANGE, SKY, VERMILION, FigureView, gpu_select, model_select,
                          plot, provenance, readout, rows_table, watch)

FIGURE_ID = "ch06-kv-budget"
TITLE = "KV budget: sequences that fit and decode time as the cache grows"
COMPUTE = kv.kv_budget
PARAMS = kv.KVBudgetParams
STATES = {  # named states (widgets.state), as the chapter uses them
    "h200": {"gpu": "H200"},
    "fp8-kv": {"kv_dtype": "fp8"}}
CONTEXTS = (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
GB = 1e9


def build() -> FigureView:
    d = PARAMS()
    gpu, model = gpu_select(d.gpu), model_select(d.model)
    context = pn.widgets.Select(label="Context per sequence",
                                options={f"{c:,} tokens": c for c in CONTEXTS}, value=d.context_tokens,
                                width=CONTROL_WIDTH)
    share = pn.widgets.FloatSlider(label="Engine's share of GPU memory", start=0.5, end=0.95, step=0.05,
                                   value=d.memory_utilisation, format="0%", width=CONTROL_WIDTH)
    kv_dtype = pn.widgets.RadioButtonGroup(options={"bf16 (2 bytes)": "bf16", "fp8 (1 byte)": "fp8"},
                                           value=d.precision.kv_dtype, width=CONTROL_WIDTH)
    kv_dtype_label = pn.pane.HTML("KV cache dtype", width=CONTROL_WIDTH, margin=(6, 10, 0, 10))

    memory = ColumnDataSource(data={"part": [], "left": [], "right": [], "colour": [], "label": []})
    device = ColumnDataSource(data={"left": [], "right": []})
    reads = ColumnDataSource(data={"batch": [], "weights_gb": [], "total_gb": []})
    step = ColumnDataSource(data={"batch": [], "step_ms": []})
    crossover = Span(location=1, dimension="height", line_dash="dashed", line_color="#888", line_width=1)

    p_mem = plot("GPU memory", "GB", "", width=600, height=120, x_range=Range1d(0, 1), y_range=Range1d(-0.6, 0.6))
    p_mem.yaxis.visible = False
    p_mem.ygrid.grid_line_color = None
    bars = p_mem.quad(left="left", right="right", bottom=-0.35, top=0.35, source=memory, fill_color="colour",
                      line_color="white")
    p_mem.quad(left="left", right="right", bottom=-0.45, top=0.45, source=device, fill_color=None,
               line_color="#444", line_width=1.5)
    p_mem.text(x="left", y=0, text="label", source=memory, x_offset=4, text_baseline="middle",
               text_font_size="11px", text_color="#222")

    p_reads = plot("Bytes read per decode step", "sequences in the batch", "GB per step", width=300, height=270)
    w_area = p_reads.varea(x="batch", y1=0, y2="weights_gb", source=reads, fill_color=GREY, fill_alpha=0.6)
    kv_area = p_reads.varea(x="batch", y1="weights_gb", y2="total_gb", source=reads, fill_color=BLUE,
                            fill_alpha=0.7)
    p_reads.add_layout(crossover)
    p_reads.add_layout(Legend(items=[LegendItem(label="KV cache", renderers=[kv_area]),
                                     LegendItem(label="weights", renderers=[w_area])],
                              location="top_left", label_text_font_size="11px", background_fill_alpha=0.7),
                       "center")

    p_step = plot("Decode step time", "sequences in the batch", "step time (ms)", width=300, height=270)
    p_step.line("batch", "step_ms", source=step, line_width=2, color=VERMILION)
    p_step.scatter("batch", "step_ms", source=step, size=4, color=VERMILION)
    numbers, note = readout(), readout(width=860)

    def update() -> None:
        r = COMPUTE(PARAMS(model=model.value, gpu=gpu.value, context_tokens=context.value,
                           memory_utilisation=share.value, precision=Precision(kv_dtype=kv_dtype.value)))
        reserve = r.reserve_bytes if r.budget_bytes > 0 else 0.0
        edges = np.cumsum([0.0, r.weight_bytes, reserve, r.budget_bytes]) / GB   # stacked: weights, reserve, KV budget
        memory.data = {"part": ["weights", "reserve", "KV budget"], "left": edges[:3], "right": edges[1:],
                       "colour": [GREY, SKY, ORANGE],
                       "label": [f"weights {r.weight_bytes / GB:,.1f} GB", "",
                                 f"KV budget {r.budget_bytes / GB:,.1f} GB" if r.budget_bytes > 0 else ""]}
        device.data = {"left": [0.0], "right": [r.device_bytes / GB]}
        p_mem.title.text = (f"GPU memory (outline): {r.device_bytes / GB:,.1f} GB = {r.memory_mib:,} MiB, "
                            f"sold as {r.memory_label}")
        p_mem.x_range.end = max(r.device_bytes, r.weight_bytes) / GB * 1.02
        fits = r.max_sequences > 0
        keep = slice(None) if fits else slice(0)            # nothing to plot when no sequence fits
        reads.data = {"batch": r.batch_grid[keep], "weights_gb": r.weight_bytes_read[keep] / GB,
                      "total_gb": (r.weight_bytes_read[keep] + r.kv_bytes_read[keep]) / GB}
        step.data = {"batch": r.batch_grid[keep], "step_ms": r.step_time_s[keep] * 1e3}
        crossover.location = r.batch_where_kv_reads_equal_weights
        rows = [
            ("GPU memory", f"{r.device_bytes / GB:,.1f} GB"),
            ("weights", f"{r.weight_bytes / GB:,.1f} GB"),
            ("reserve (activations)", f"{r.reserve_bytes / GB:,.1f} GB"),
            ("KV budget", f"{r.budget_bytes / GB:,.1f} GB"),
            ("cache per sequence", f"{r.kv_bytes_per_sequence / GB:,.3g} GB"),
            ("sequences that fit", f"{r.max_sequences:,}"),
            ("cache reads = weight reads at (dashed)", f"{r.batch_where_kv_reads_equal_weights:,.1f} sequences"),
        ]
        if fits:
            rows += [
                (f"at {r.max_sequences:,} sequences: step", f"{r.step_time_s[-1] * 1e3:,.1f} ms"),
                ("cache share of bytes read", f"{r.kv_share_of_reads[-1]:.0%}"),
                ("total", f"{r.tokens_per_s_total[-1]:,.0f} tokens/s"),
            ]
        else:
            rows += [("decode", "impossible: the weights alone exceed the memory the engine may use")]
        numbers.object = rows_table(rows)
        note.object = provenance(
            f"{r.model}, bf16 weights, {kv_dtype.value} KV cache in blocks of "
            f"{d.block_size} tokens. GPU memory as the driver reports it. KV budget = share x GPU memory "
            f"- weights - a reserve of {r.reserve_bytes / 2 ** 30:.0f} GiB (pale blue) for activations, workspaces "
            f"and CUDA graphs: an assumption standing in for the peak vLLM profiles. Each decode step reads the weights once and "
            f"every sequence's cache. {r.calibration_note}")

    watch([gpu, model, context, share, kv_dtype], update)
    update()
    layout = pn.Column(
        pn.Row(pn.Column(gpu, model, context, share, kv_dtype_label, kv_dtype, numbers, width=CONTROL_WIDTH + 20),
               pn.Column(pn.pane.Bokeh(p_mem), pn.Row(pn.pane.Bokeh(p_reads), pn.pane.Bokeh(p_step)))),
        note)
    return FigureView(FIGURE_ID, layout,
                      controls={"gpu": gpu, "model": model, "context": context, "share": share,
                                "kv_dtype": kv_dtype},
                      sources={"memory": memory, "device": device, "reads": reads, "step": step},
                      readouts={"numbers": numbers, "note": note}, plots=[p_mem, p_reads, p_step])
