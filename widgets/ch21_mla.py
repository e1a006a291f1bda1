"""ch21-mla: what multi-head latent attention caches, and what a decode step's attention costs.

KV bytes per token of the catalogue's models as trained and of DeepSeek-V3 (MLA); then, on
DeepSeek-V3's attention shapes, MHA, GQA (8 groups), MQA and MLA (absorbed, or with keys and
values rebuilt from the latent each step): the cache per token, the tokens and sequences a
deployment of DeepSeek-V3 holds, and one sequence's attention time per decode step against
the context (roofline bounds at the spec sheet's rates).

Controls: context, KV format, GPU, GPUs. One call: sim.mla.mla_attention.
"""
from __future__ import annotations

import panel as pn
from bokeh.models import ColumnDataSource, FactorRange, Legend, LegendItem, Span

from sim import mla
from widgets.base import (BLUE, CONTROL_WIDTH, GREEN, ORANGE, PURPLE, SKY, VERMILION, FigureView, fmt_ms, gpu_select,
                          label_ticks, plot, provenance, readout, tokens_label, watch)

FIGURE_ID = "ch21-mla"
TITLE = "Latent attention: the cache per token, and a decode step's attention"
COMPUTE = mla.mla_attention
PARAMS = mla.MlaParams
STATES = {  # named states (widgets.state), as the chapter uses them
    "fp8-kv": {"kv_dtype": "fp8"},
    "million": {"context": 1048576},
    "h100": {"gpu": "H100-SXM", "gpus": 16},
}
CONTEXTS = [2 ** k for k in range(10, 21)]
COLOURS = {"mha": VERMILION, "gqa": ORANGE, "mqa": SKY, "mla": BLUE, "mla-expand": PURPLE}
NAMES = ("Llama 2 7B", "Llama 3.1 8B", "Llama 3.1 70B", "Mixtral 8x7B", "Qwen3-235B-A22B", "DeepSeek-V3 (MLA)")


def build() -> FigureView:
    d = PARAMS()
    context = pn.widgets.Select(label="Context (tokens)", options={f"{tokens_label(c)} ({c:,})": c for c in CONTEXTS},
                                value=d.context_tokens, width=CONTROL_WIDTH)
    dtype = pn.widgets.RadioButtonGroup(options={"KV bf16": "bf16", "KV fp8": "fp8"}, value=d.kv_dtype,
                                        width=CONTROL_WIDTH)
    gpu = gpu_select(d.gpu, names=list(mla.GPUS))
    gpus = pn.widgets.Select(label="GPUs serving DeepSeek-V3 (fp8)", options={str(n): n for n in mla.DEPLOY_GPUS},
                             value=d.gpus, width=CONTROL_WIDTH)

    bars = ColumnDataSource(data={"model": [], "kib": [], "label": [], "colour": []})
    curves = ColumnDataSource(data={"context": [], **{k: [] for k, *_ in mla.VARIANTS}})
    pk = plot("KV cache a token, all layers", "KiB", "", width=300, height=300,
              y_range=FactorRange(factors=list(NAMES)[::-1]))
    pk.hbar(y="model", right="kib", height=0.7, source=bars, fill_color="colour", line_color=None)
    pk.text(x="kib", y="model", text="label", source=bars, x_offset=3, text_baseline="middle", text_font_size="10px")
    pk.x_range.start = 0
    pt = plot("One sequence's attention a decode step (DeepSeek-V3 shapes)", "context (tokens, log)",
              "seconds (log)", width=560, height=340, x_type="log", y_type="log")
    items = [LegendItem(label=label, renderers=[pt.line("context", k, source=curves, line_width=3 if k == "mla" else 2,
                                                         color=COLOURS[k])]) for k, label, *_ in mla.VARIANTS]
    pt.add_layout(Legend(items=items, location="top_left", label_text_font_size="10px", background_fill_alpha=0.7,
                         padding=2, margin=4, spacing=0), "center")
    here = Span(location=d.context_tokens, dimension="height", line_color="#888", line_width=1)
    pt.add_layout(here)
    label_ticks(pt.xaxis, {c: tokens_label(c) for c in CONTEXTS[::2]})

    table, note = readout(width=880), readout(width=880)

    def update() -> None:
        try:
            r = COMPUTE(PARAMS(context_tokens=context.value, kv_dtype=dtype.value, gpu=gpu.value, gpus=gpus.value))
        except ValueError as exc:          # a combination the sim refuses: say so, keep the plots as they were
            table.object = f'<p class="fig-warning">Not computed: {exc}.</p>'
            return
        kib = [r.model_kv[n] / 1024 for n in NAMES]
        bars.data = {"model": list(NAMES), "kib": kib, "label": [f"{k:,.1f}" for k in kib],
                     "colour": [BLUE if "MLA" in n else GREEN for n in NAMES]}
        pk.x_range.end = 1.35 * max(kib)
        curves.data = {"context": r.contexts, **r.step_s}
        here.location = context.value
        fits = r.kv_budget_bytes > 0
        body = "".join(
            f"<tr><th>{v.label}</th><td>{v.kv_bytes_per_token / 1024:,.1f}</td><td>{v.intensity:,.0f}</td>"
            f"<td>{f'{v.tokens_that_fit:,}' if fits else '-'}</td><td>{f'{v.sequences_that_fit:,}' if fits else '-'}</td>"
            f"<td>{fmt_ms(v.step_s, 2)}</td><td>{v.bound}</td></tr>" for v in r.variants)
        table.object = (
            '<table class="fig-numbers" style="font-size: 0.9em"><tr><th>DeepSeek-V3 shapes</th><th>KiB a token</th>'
            f"<th>FLOP per cache byte</th><th>tokens that fit</th><th>sequences of {tokens_label(context.value)}</th>"
            f"<th>attention at {tokens_label(context.value)}</th><th>bound</th></tr>{body}</table>"
            + ("" if fits else f'<p class="fig-warning">DeepSeek-V3\'s {r.weight_bytes / 1e9:,.0f} GB of fp8 weights '
                               f"leave no room for a cache on {gpus.value} of these GPUs.</p>"))
        note.object = provenance(
            f"{r.note} The GPU's ridge in bf16: {r.ridge:,.0f} FLOP/byte; a variant above it is bound by its "
            f"math. KV budget of the deployment: {r.kv_budget_bytes / 2 ** 30:,.0f} GiB. Other models: as trained "
            f"(GQA, or MHA for Llama 2 7B), sim.kv's bytes per token.")

    watch([context, dtype, gpu, gpus], update)
    update()
    layout = pn.Column(
        pn.Row(pn.Column(context, dtype, gpu, gpus, width=CONTROL_WIDTH + 20),
               pn.Column(pn.Row(pn.pane.Bokeh(pk), pn.pane.Bokeh(pt)))),
        table, note)
    return FigureView(FIGURE_ID, layout, controls={"context": context, "kv_dtype": dtype, "gpu": gpu, "gpus": gpus},
                      sources={"bars": bars, "curves": curves}, readouts={"table": table, "note": note},
                      plots=[pk, pt])
