"""ch00-decode-meter: the memory wall, one decode step at a time.

Each decode step of a dense model reads every weight from HBM once and does about two
FLOPs per weight for each user in the batch. For one user that is about one FLOP per
byte, far below what the tensor cores could sustain: the time to read the bytes dwarfs
the time to do the math, so the tensor cores sit almost idle (well under 1% busy) while
the memory system runs near its limit. Raising the batch shares the same bytes across
more tokens, and the FLOP bar and the tensor-core meter climb. Switching the KV cache
off shows what the cache saves: every step pushes the whole prefix through the model
again, its FLOPs grow with each token and the step becomes compute-bound.

Controls: a stepper over decode steps (each adds one token per user), GPU, model,
batch (users decoding together) and the KV cache (kept, or none). One call per update:
sim.decode.decode_meter.
"""
from __future__ import annotations

import panel as pn
from bokeh.models import ColumnDataSource, FactorRange, Legend, LegendItem, Range1d

from sim import decode
from widgets.base import (BLUE, CONTROL_WIDTH, GREY, ORANGE, SKY, VERMILION, FigureView, fmt_ms, gpu_select,
                          model_select, plot, provenance, readout, rows_table, stepper, watch)

FIGURE_ID = "ch00-decode-meter"
TITLE = "Bytes read against FLOPs done in each decode step"
COMPUTE = decode.decode_meter
PARAMS = decode.DecodeMeterParams
STATES = {  # named states (widgets.state), as the chapter uses them
    "h200": {"gpu": "H200"},
    "batch-64": {"batch": 64},
    "no-kv-cache": {"cache": False, "step": 32}}
STEPS = 32                                  # decode steps the stepper walks through
PROMPT_TOKENS = 512                         # tokens each user holds in the cache before step 1
MAX_BATCH = 512
METER_ROWS = ["step", "FLOPs", "bytes"]     # bottom to top
UTIL_ROWS = ["tensor cores", "HBM bandwidth"]


def build() -> FigureView:
    step = stepper(STEPS, label="Decode step", interval_ms=600, start=1)   # numbered from 1, like the readout
    gpu, model = gpu_select(), model_select()
    batch = pn.widgets.IntSlider(label="Batch (users decoding together)", start=1, end=MAX_BATCH, value=1,
                                 width=CONTROL_WIDTH)
    cache_label = pn.pane.HTML("KV cache", width=CONTROL_WIDTH, margin=(6, 10, 0, 10))
    cache = pn.widgets.RadioButtonGroup(options={"kept": True, "none: recompute the prefix": False}, value=True,
                                        width=CONTROL_WIDTH)

    meter = ColumnDataSource(data={"row": [], "ms": [], "color": [], "label": []})
    util = ColumnDataSource(data={"row": [], "pct": [], "color": [], "label": []})
    steps = ColumnDataSource(data={"step": [], "weights_gb": [], "total_gb": []})

    p_meter = plot("This step: time for its bytes, for its FLOPs", "milliseconds", "",
                   width=370, height=220, y_type="auto", y_range=FactorRange(*METER_ROWS))
    p_meter.hbar(y="row", left=0, right="ms", height=0.4, color="color", source=meter)
    p_meter.text(x=0, y="row", text="label", source=meter, y_offset=-11, text_baseline="bottom",
                 text_font_size="11px", text_color="#333")
    p_meter.x_range.start = 0
    p_meter.x_range.range_padding = 0.1
    p_meter.ygrid.grid_line_color = None

    p_util = plot("How busy the chip is", "", "% of peak", width=220, height=220, x_type="auto",
                  x_range=FactorRange(*UTIL_ROWS), y_range=Range1d(0, 110))
    p_util.vbar(x="row", top="pct", width=0.6, color="color", source=util)
    p_util.text(x="row", y="pct", text="label", source=util, y_offset=-4, text_align="center",
                text_font_size="11px", text_color="#333")
    p_util.xgrid.grid_line_color = None

    p_steps = plot("HBM bytes read in each step so far", "decode step", "GB read",
                   width=600, height=200, x_range=Range1d(0.5, STEPS + 0.5))
    w_bars = p_steps.vbar(x="step", bottom=0, top="weights_gb", width=0.7, color=BLUE, source=steps)
    kv_bars = p_steps.vbar(x="step", bottom="weights_gb", top="total_gb", width=0.7, color=ORANGE, source=steps)
    p_steps.y_range.start = 0
    p_steps.y_range.range_padding = 1.4          # room above the bars for the legend
    p_steps.add_layout(Legend(items=[LegendItem(label="weights", renderers=[w_bars]),
                                     LegendItem(label="KV cache and activations", renderers=[kv_bars])],
                              location="top_left", orientation="horizontal", label_text_font_size="11px",
                              background_fill_alpha=0.8), "center")

    for p in (p_meter, p_util, p_steps):
        p.toolbar_location = None                 # nothing to zoom: keep the titles clear
    numbers, note = readout(), readout(width=840)

    def update() -> None:
        r = COMPUTE(PARAMS(model=model.value, gpu=gpu.value, batch=batch.value, prompt_tokens=PROMPT_TOKENS,
                           steps=STEPS, kv_cache=cache.value))
        i = step.value - 1
        t_mem, t_fl, t_step = r.memory_floor_s[i] * 1e3, r.compute_floor_s[i] * 1e3, r.step_time_s[i] * 1e3
        meter.data = {"row": ["bytes", "FLOPs", "step"], "ms": [t_mem, t_fl, t_step],
                      "color": [BLUE, VERMILION, GREY],
                      "label": [f"{r.bytes_per_step[i] / 1e9:,.2f} GB at peak bandwidth: {t_mem:.3g} ms",
                                f"{r.flops_per_step[i] / 1e9:,.1f} GFLOP at peak FLOP/s: {t_fl:.3g} ms",
                                f"modelled step (real efficiencies): {t_step:.3g} ms"]}
        tc, bw = r.tensor_core_utilisation[i] * 100, r.bandwidth_utilisation[i] * 100
        util.data = {"row": UTIL_ROWS, "pct": [tc, bw], "color": [VERMILION, SKY],
                     "label": [f"{tc:.2g}%" if tc < 10 else f"{tc:.0f}%", f"{bw:.0f}%"]}
        steps.data = {"step": r.step[:i + 1], "weights_gb": r.weight_bytes_per_step[:i + 1] / 1e9,
                      "total_gb": r.bytes_per_step[:i + 1] / 1e9}
        numbers.object = rows_table([
            ("step", f"{int(r.step[i])} of {STEPS}"),
            ("cache per user", f"{int(r.context_tokens[i]):,} tokens" if cache.value
             else f"none: {PROMPT_TOKENS + i + 1:,} tokens recomputed"),
            ("bytes read", f"{r.bytes_per_step[i] / 1e9:.2f} GB"),
            ("FLOPs done", f"{r.flops_per_step[i] / 1e9:,.1f} GFLOP"),
            ("FLOPs per byte", f"{r.flops_per_byte[i]:,.1f}"),
            ("step time", fmt_ms(r.step_time_s[i], 2)),
            ("tokens so far", f"{int(r.tokens_generated[i]):,}"),
            ("time so far", fmt_ms(r.cumulative_time_s[i])),
            ("per user", f"{r.tokens_per_s_per_user:,.{0 if r.tokens_per_s_per_user >= 10 else 1}f} tokens/s"),
            ("all users", f"{r.tokens_per_s_total:,.0f} tokens/s"),
        ])
        fits = "" if r.weight_bytes_per_step[0] <= r.memory_bytes else (
            f" These weights ({r.weight_bytes_per_step[0] / 1e9:,.0f} GB) do not fit in one "
            f"{r.memory_label} GPU ({r.memory_bytes / 1e9:.1f} GB); the figure times the step as if they did.")
        note.object = provenance(
            f"{r.model}, bf16 weights and KV cache, {PROMPT_TOKENS}-token prompt per "
            f"user, CUDA graphs on. Bytes read count the weights each step uses: all but the embedding table, "
            f"of which only the new tokens' rows are gathered. Peaks: {r.peak_flops_per_s / 1e12:,.0f} TFLOP/s, "
            f"{r.peak_bandwidth_bytes_per_s / 1e12:.2f} TB/s. Tokens/s are means over the {STEPS} steps. "
            f"{r.calibration_note.rstrip('.')}.{fits}")

    watch([step, gpu, model, batch, cache], update)
    update()
    layout = pn.Column(
        pn.Row(pn.Column(step, gpu, model, batch, cache_label, cache, numbers, width=CONTROL_WIDTH + 20),
               pn.Column(pn.Row(pn.pane.Bokeh(p_meter), pn.pane.Bokeh(p_util)), pn.pane.Bokeh(p_steps))),
        note)
    return FigureView(FIGURE_ID, layout, controls={"step": step, "gpu": gpu, "model": model, "batch": batch,
                                                        "cache": cache},
                      sources={"meter": meter, "util": util, "steps": steps},
                      readouts={"numbers": numbers, "note": note}, plots=[p_meter, p_util, p_steps])
