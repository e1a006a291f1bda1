"""ch05-latency: the numbers a user feels, for one request on an otherwise idle GPU.

Time to first token (TTFT) is the prefill of the whole prompt; time per output token
(TPOT) is one decode step; end-to-end latency is TTFT plus one TPOT for every output
token after the first. A long prompt makes the first token slow (and attention's share
of the prefill grows with the square of the prompt length); a long answer makes the
whole reply slow while each token still arrives quickly.

Controls: workload preset (chat, summarise a long document, write an essay; choosing one
moves the two length sliders to its lengths), prompt length, output length, GPU and
model. The RTX 4090 is left out: at the longest lengths the 8B model and its KV cache
do not fit in its 24 GB. One call: sim.latency.estimate_latency.
"""
from __future__ import annotations

import panel as pn
from bokeh.models import ColumnDataSource, DataRange1d, FactorRange, Range1d

from sim.latency import PRESETS, LatencyParams, estimate_latency
from widgets.base import (BLUE, CONTROL_WIDTH, GREEN, ORANGE, PURPLE, VERMILION, FigureView, gpu_select, inset_legend,
                          model_select, plot, provenance, readout, rows_table, watch)

FIGURE_ID = "ch05-latency"
TITLE = "TTFT, TPOT and end-to-end latency of one request"
COMPUTE = estimate_latency
PARAMS = LatencyParams
STATES = {  # named states (widgets.state), as the chapter uses them
    "summarise": {"preset": "summarise"},
    "essay": {"preset": "essay"}}

PRESET_LABELS = {"chat": "chat", "summarise": "summarise", "essay": "essay"}
# slider ranges: prompt + output stays within Llama 3.1's 131,072-token context
GPUS = ["H100-SXM", "H200", "A100-80GB", "B200", "L40S"]
MODELS = ["llama-3.1-8b", "llama-3.2-1b"]
ROWS = ["end to end", "first token (TTFT)", "each later token (TPOT)"]


def _ms(s: float) -> str:
    ms = s * 1e3
    if ms >= 10_000:
        return f"{s:,.1f} s"
    return f"{ms:,.0f} ms" if ms >= 100 else f"{ms:.3g} ms"


def build() -> FigureView:
    preset = pn.widgets.RadioButtonGroup(label="Workload", options={v: k for k, v in PRESET_LABELS.items()},
                                         value="chat", width=CONTROL_WIDTH)
    prompt = pn.widgets.IntSlider(label="Prompt (tokens)", start=100, end=128_000, step=100,
                                  value=PRESETS["chat"].prompt_tokens, width=CONTROL_WIDTH)
    output = pn.widgets.IntSlider(label="Output (tokens)", start=10, end=3_000, step=10,
                                  value=PRESETS["chat"].output_tokens, width=CONTROL_WIDTH)
    gpu = gpu_select(names=GPUS)
    model = model_select(label="Model (bf16)", names=MODELS)

    bars = ColumnDataSource(data={"row": [], "left": [], "right": [], "text": [], "colour": []})
    limits = ColumnDataSource(data={"row": [], "x": []})
    share = ColumnDataSource(data={"prompt": [], "share": []})
    share_now = ColumnDataSource(data={"prompt": [], "share": []})
    itl = ColumnDataSource(data={"token": [], "itl_ms": []})
    levels = ColumnDataSource(data={"token": [], "tpot_ms": [], "limit_ms": []})   # two points: first, last token

    p_ladder = plot("How long each wait is", "milliseconds (log scale)", "", x_type="log", y_type="auto",
                    width=600, height=190, y_range=FactorRange(factors=ROWS), x_range=Range1d(0.1, 1e6))
    p_ladder.hbar(y="row", left="left", right="right", height=0.6, source=bars, color="colour", alpha=0.85)
    p_ladder.text(x="right", y="row", text="text", source=bars, x_offset=5, y_offset=7, text_font_size="11px",
                  text_color="#333")
    lim = p_ladder.scatter("x", "row", source=limits, marker="triangle", size=11, color=VERMILION)
    inset_legend(p_ladder, [("MLPerf v5.0 interactive limit (P99, Llama 2 70B)", lim)])
    p_ladder.ygrid.grid_line_color = None

    p_share = plot("Attention's share of the prefill", "prompt length (tokens, log scale)", "share of TTFT (%)",
                   x_type="log", width=300, height=250, y_range=Range1d(0, 100))
    p_share.line("prompt", "share", source=share, line_width=2, color=PURPLE)
    p_share.scatter("prompt", "share", source=share_now, size=9, color=ORANGE)

    p_itl = plot("Gap before each output token", "output token", "ITL (ms)", width=300, height=250,
                 y_range=DataRange1d(start=0))
    r_lim = p_itl.line("token", "limit_ms", source=levels, line_width=1, color=VERMILION)
    r_tpot = p_itl.line("token", "tpot_ms", source=levels, line_width=1, color=BLUE, line_dash="dashed")
    r_itl = p_itl.line("token", "itl_ms", source=itl, line_width=2, color=GREEN)
    inset_legend(p_itl, [("ITL", r_itl), ("TPOT (mean)", r_tpot), ("MLPerf TPOT limit", r_lim)], "center_right")

    numbers, note = readout(), readout(width=860)
    syncing = [False]

    def on_preset() -> None:
        w = PRESETS[preset.value]
        syncing[0] = True
        try:
            prompt.value, output.value = w.prompt_tokens, w.output_tokens
        finally:
            syncing[0] = False
        update()

    def on_other() -> None:
        if not syncing[0]:
            update()

    def update() -> None:
        r = estimate_latency(LatencyParams(model=model.value, gpu=gpu.value, preset=preset.value,
                                           prompt_tokens=prompt.value, output_tokens=output.value))
        values = [r.e2e_s, r.ttft_s, r.tpot_s]
        bars.data = {"row": ROWS, "left": [0.1] * 3, "right": [v * 1e3 for v in values],
                     "text": [_ms(v) for v in values], "colour": [GREEN, BLUE, ORANGE]}
        limits.data = {"row": ROWS[1:], "x": [r.slo_ttft_s * 1e3, r.slo_tpot_s * 1e3]}
        share.data = {"prompt": r.prompt_grid_tokens, "share": r.attention_share_grid * 100}
        share_now.data = {"prompt": [r.prompt_tokens], "share": [r.attention_share_of_prefill * 100]}
        itl.data = {"token": list(range(2, r.output_tokens + 1)), "itl_ms": r.itl_s * 1e3}
        levels.data = {"token": [2, r.output_tokens], "tpot_ms": [r.tpot_s * 1e3] * 2,
                       "limit_ms": [r.slo_tpot_s * 1e3] * 2}
        numbers.object = rows_table([
            ("prompt / output", f"{r.prompt_tokens:,} / {r.output_tokens:,} tokens"),
            ("TTFT", _ms(r.ttft_s)),
            ("TPOT (dashed)", _ms(r.tpot_s)),
            ("end to end", _ms(r.e2e_s)),
            ("streaming speed", f"{r.tokens_per_s_per_user:,.0f} tokens/s"),
            ("a reader", f"~{r.reading_speed_tokens_per_s:.1f} tokens/s"),
            ("attention in prefill", f"{r.attention_share_of_prefill * 100:.1f}%"),
            ("MLPerf limits", "met" if r.meets_slo else "missed"),
        ])
        note.object = provenance(r.note)

    preset.param.watch(lambda _e: on_preset(), "value")
    watch([prompt, output, gpu, model], on_other)
    update()
    layout = pn.Column(
        pn.Row(pn.Column(preset, prompt, output, gpu, model, numbers, width=CONTROL_WIDTH + 20),
               pn.Column(pn.pane.Bokeh(p_ladder), pn.Row(pn.pane.Bokeh(p_share), pn.pane.Bokeh(p_itl)))),
        note)
    return FigureView(FIGURE_ID, layout,
                      controls={"preset": preset, "prompt": prompt, "output": output, "gpu": gpu, "model": model},
                      sources={"bars": bars, "limits": limits, "share": share, "share_now": share_now, "itl": itl,
                               "levels": levels},
                      readouts={"numbers": numbers, "note": note}, plots=[p_ladder, p_share, p_itl])
