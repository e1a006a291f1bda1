"""ch02-phases: a request runs in two phases, prefill and decode, that cost very different things.

Prefill pushes the whole prompt through the model in one pass: every weight read from
memory is used for every prompt token, so the pass does hundreds of FLOPs per byte and
is compute-bound. Its last logits already give the first output token. Decode then
makes one pass per further output token: each pass reads all the weights again for a
single token per conversation, about one FLOP per byte, and is memory-bound; it also
reads the whole KV cache, so a long prompt makes every decode step slower once the
cache's bytes approach the weights'. The
timeline shows the two phases of one request; the bars compare their arithmetic
intensity with the GPU's ridge point and the time each spends per token.

Controls: prompt length, output length, GPU and model. One call per update:
sim.decode.phase_times (its result carries the ridge point and the calibration note too).
"""
from __future__ import annotations

import math

import panel as pn
from bokeh.models import ColumnDataSource, FactorRange, Range1d, Span

from sim import decode
from widgets.base import (BLUE, CONTROL_WIDTH, VERMILION, FigureView, gpu_select, model_select, plot, provenance,
                          readout, rows_table, watch)

FIGURE_ID = "ch02-phases"
TITLE = "Prefill and decode of one request"
COMPUTE = decode.phase_times
PARAMS = decode.PhaseParams
STATES = {  # named states (widgets.state), as the chapter uses them
    "prompt-128k": {"prompt": 131072},
    "h200": {"gpu": "H200"},
    "one-output-token": {"output": 1}}
PHASES = ["decode", "prefill"]            # bottom to top on the timeline
BOUND_COLORS = {"compute": VERMILION, "memory": BLUE}
INTENSITY_FLOOR, INTENSITY_CEIL = 0.3, 3e4        # FLOP/byte axis
PER_TOKEN_FLOOR, PER_TOKEN_CEIL = 1e-3, 3e3       # ms axis


def ms(seconds: float) -> str:
    """A duration in seconds as text: µs below 0.1 ms, ms below 10 s, then s."""
    if seconds < 1e-4:
        return f"{seconds * 1e6:.3g} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e3:,.0f} ms" if seconds < 10 else f"{seconds:,.1f} s"


def build() -> FigureView:
    prompt = pn.widgets.IntSlider(label="Prompt length (tokens)", start=16, end=131072, step=16, value=1024,
                                  width=CONTROL_WIDTH)
    output = pn.widgets.IntSlider(label="Output length (tokens)", start=1, end=4096, value=256, width=CONTROL_WIDTH)
    gpu, model = gpu_select(), model_select()

    timeline = ColumnDataSource(data={"phase": [], "start_s": [], "end_s": [], "color": [], "label": []})
    first = ColumnDataSource(data={"phase": [], "s": []})
    intensity = ColumnDataSource(data={"phase": [], "flop_per_byte": [], "color": [], "label": []})
    ridge_label = ColumnDataSource(data={"phase": [], "flop_per_byte": [], "label": []})
    per_token = ColumnDataSource(data={"kind": [], "ms": [], "color": [], "label": []})

    p_time = plot("One request, start to last token", "time since the request arrived (s)", "",
                  width=600, height=190, y_type="auto", y_range=FactorRange(*PHASES))
    p_time.hbar(y="phase", left="start_s", right="end_s", height=0.4, color="color", source=timeline)
    p_time.text(x=0, y="phase", text="label", source=timeline, y_offset=-11, text_baseline="bottom",
                text_font_size="11px", text_color="#333")
    p_time.scatter(x="s", y="phase", source=first, marker="diamond", size=13, color="#111")
    p_time.x_range.start = 0
    p_time.x_range.range_padding = 0.1
    p_time.ygrid.grid_line_color = None

    p_int = plot("FLOPs per byte of each phase", "", "FLOP per byte (log scale)", width=300, height=250,
                 x_type="auto", x_range=FactorRange("prefill", "decode"), y_type="log",
                 y_range=Range1d(INTENSITY_FLOOR, INTENSITY_CEIL))
    p_int.vbar(x="phase", bottom=INTENSITY_FLOOR, top="flop_per_byte", width=0.55, color="color", source=intensity)
    p_int.text(x="phase", y="flop_per_byte", text="label", source=intensity, y_offset=-4, text_align="center",
               text_font_size="11px", text_color="#333")
    ridge = Span(location=1, dimension="width", line_dash="dashed", line_color="#555", line_width=1)
    p_int.add_layout(ridge)
    p_int.text(x="phase", y="flop_per_byte", text="label", source=ridge_label, y_offset=-4, text_align="center",
               text_font_size="11px", text_color="#555")
    p_int.xgrid.grid_line_color = None

    p_tok = plot("Time per token", "", "ms per token (log scale)", width=290, height=250,
                 x_type="auto", x_range=FactorRange("prompt token", "output token"), y_type="log",
                 y_range=Range1d(PER_TOKEN_FLOOR, PER_TOKEN_CEIL))
    p_tok.vbar(x="kind", bottom=PER_TOKEN_FLOOR, top="ms", width=0.55, color="color", source=per_token)
    p_tok.text(x="kind", y="ms", text="label", source=per_token, y_offset=-4, text_align="center",
               text_font_size="11px", text_color="#333")
    p_tok.xgrid.grid_line_color = None

    for p in (p_time, p_int, p_tok):
        p.toolbar_location = None                 # nothing to zoom: keep the titles clear
    numbers, note = readout(), readout(width=840)

    def update() -> None:
        r = COMPUTE(PARAMS(model=model.value, gpu=gpu.value, prompt_tokens=prompt.value, output_tokens=output.value))
        ridge_at = r.ridge_flop_per_byte
        steps = output.value - 1
        timeline.data = {
            "phase": ["prefill", "decode"], "start_s": [0.0, r.prefill_time_s], "end_s": [r.prefill_time_s, r.total_time_s],
            "color": [BOUND_COLORS[r.prefill_bound], BOUND_COLORS[r.decode_bound]],
            "label": [f"prefill: {ms(r.prefill_time_s)}, {r.prefill_bound}-bound; its logits give token 1 (diamond)",
                      f"decode: {ms(r.decode_time_s)}, {steps:,} steps, {r.decode_bound}-bound" if steps
                      else "decode: none, the only output token came from the prefill"]}
        first.data = {"phase": ["prefill"], "s": [r.prefill_time_s]}
        intensity.data = {
            "phase": ["prefill", "decode"],
            "flop_per_byte": [r.prefill_intensity_flop_per_byte, r.decode_intensity_flop_per_byte],
            "color": [BOUND_COLORS[r.prefill_bound], BOUND_COLORS[r.decode_bound]],
            "label": [f"{r.prefill_intensity_flop_per_byte:,.0f}", f"{r.decode_intensity_flop_per_byte:.2f}"]}
        ridge.location = ridge_at
        ridge_label.data = {"phase": ["decode"], "flop_per_byte": [ridge_at], "label": [f"ridge {ridge_at:,.0f}"]}
        has_decode = not math.isnan(r.time_per_output_token_s)
        per_token.data = {
            "kind": ["prompt token", "output token"],
            "ms": [r.time_per_prompt_token_s * 1e3, r.time_per_output_token_s * 1e3 if has_decode else PER_TOKEN_FLOOR],
            "color": [BOUND_COLORS[r.prefill_bound], BOUND_COLORS[r.decode_bound]],
            "label": [ms(r.time_per_prompt_token_s), ms(r.time_per_output_token_s) if has_decode else "no decode"]}
        rows = [("prefill", f"{ms(r.prefill_time_s)}, {prompt.value:,} tokens"),
                ("", f"{r.prefill_bound}-bound, {r.prefill_tokens_per_s:,.0f} tokens/s"),
                ("first token at", ms(r.prefill_time_s))]
        if has_decode:
            rows += [("decode", f"{ms(r.decode_time_s)}, {steps:,} steps"),
                     ("", f"{r.decode_bound}-bound, {r.decode_tokens_per_s_per_user:,.0f} tokens/s"),
                     ("per output token", ms(r.time_per_output_token_s)),
                     ("decode step", f"{ms(r.decode_step_time_s[0])} at {prompt.value:,} tokens of context"),
                     ("", f"{ms(r.decode_step_time_s[-1])} at {prompt.value + steps - 1:,}")]
        else:
            rows += [("decode", "none: 1 output token")]
        rows += [("cache reads = weights at", f"{r.kv_equals_weights_context_tokens:,.0f} tokens of context")]
        numbers.object = rows_table([*rows, ("whole request", ms(r.total_time_s))])
        note.object = provenance(
            f"{r.model} on {r.gpu}, one request, bf16 weights and KV "
            f"cache; prefill runs as separate kernels, decode steps as CUDA graphs. Dashed: the ridge point, "
            f"peak FLOP/s over peak bandwidth. A model too big for one GPU's memory is timed as if it fitted "
            f"(chapter 12 splits it). {r.calibration_note.rstrip('.')}.")

    watch([prompt, output, gpu, model], update)
    update()
    layout = pn.Column(
        pn.Row(pn.Column(prompt, output, gpu, model, numbers, width=CONTROL_WIDTH + 20),
               pn.Column(pn.pane.Bokeh(p_time), pn.Row(pn.pane.Bokeh(p_int), pn.pane.Bokeh(p_tok)))),
        note)
    return FigureView(FIGURE_ID, layout, controls={"prompt": prompt, "output": output, "gpu": gpu, "model": model},
                      sources={"timeline": timeline, "first": first, "intensity": intensity,
                               "ridge": ridge_label, "per_token": per_token},
                      readouts={"numbers": numbers, "note": note}, plots=[p_time, p_int, p_tok])
