"""ch17-long-context: what a long context costs, and what each way of keeping less of it saves.

At a chosen context (1K to 1M tokens) the figure shows, for full attention and for the
ways of attending to less (a sliding window, a window with attention sinks, a cache
evicted to a budget, an fp8 cache, and a hybrid with one global layer in N), the decode
step split into its attention kernels and everything else, and along the whole range of
contexts: the KV cache of one sequence against the room on the GPU, the decode step and
the prefill of a prompt that long. The dashed line marks the context where full
attention's cache reads equal the weights a step reads.

Controls: GPU, model, context, batch, window W, eviction budget B, hybrid N.
One call: sim.long_context.long_context.
"""
from __future__ import annotations

import panel as pn
from bokeh.models import ColumnDataSource, FactorRange, Legend, LegendItem, Span

from sim import long_context as lc
from widgets.base import (BLUE, CONTROL_WIDTH, GREEN, GREY, ORANGE, PURPLE, SKY, VERMILION, FigureView, fmt_gib,
                          fmt_ms, gpu_select, label_ticks, model_select, plot, provenance, readout, rows_table,
                          tokens_label, watch)

FIGURE_ID = "ch17-long-context"
TITLE = "Long context: the cache, a decode step and a prefill, from 1K to 1M tokens"
COMPUTE = lc.long_context
PARAMS = lc.LongContextParams
STATES = {  # named states (widgets.state), as the chapter uses them
    "128k": {"context": 131072},
    "1m": {"context": 1048576},
    "gemma-like": {"context": 131072, "window": 1024, "global_every": 6}}
CONTEXTS = [2 ** k for k in range(10, 21)]               # 1K .. 1M tokens
SIZES = [512, 1024, 2048, 4096, 8192, 16384, 32768]      # window and budget choices
COLOURS = {"full": BLUE, "window": ORANGE, "sinks": SKY, "evict": VERMILION, "fp8": PURPLE, "hybrid": GREEN}
DASHES = {"sinks": "dashed", "fp8": "dotdash"}


def build() -> FigureView:
    d = PARAMS()
    gpu, model = gpu_select(d.gpu), model_select(d.model, names=["llama-3.1-8b", "llama-3.1-70b", "llama-3.2-1b",
                                                                  "mixtral-8x7b"])
    context = pn.widgets.Select(label="Context (tokens)", options={f"{tokens_label(c)} ({c:,})": c for c in CONTEXTS},
                                value=d.context_tokens, width=CONTROL_WIDTH)
    batch = pn.widgets.Select(label="Sequences decoding together", options=[1, 4, 16, 64], value=d.batch,
                              width=CONTROL_WIDTH)
    window = pn.widgets.Select(label="Window W (window, sinks, hybrid)",
                               options={f"{s:,} tokens": s for s in SIZES}, value=d.window_tokens,
                               width=CONTROL_WIDTH)
    budget = pn.widgets.Select(label="Eviction budget B per layer", options={f"{s:,} tokens": s for s in SIZES},
                               value=d.kv_budget_tokens, width=CONTROL_WIDTH)
    every = pn.widgets.Select(label="Hybrid: one full-attention layer in",
                              options={f"{n} layers": n for n in (2, 4, 6, 8)}, value=d.global_every,
                              width=CONTROL_WIDTH)

    methods = list(lc.METHODS)
    names = [lc.LABELS[m] for m in methods]
    bars = ColumnDataSource(data={"method": [], "rest_ms": [], "total_ms": []})
    curves = ColumnDataSource(data={"context": [], **{f"{k}_{m}": [] for m in methods for k in ("kv", "dec", "pre")}})
    room = Span(location=1, dimension="width", line_color="#444", line_dash="dashed", line_width=1)
    here = [Span(location=d.context_tokens, dimension="height", line_color="#888", line_width=1) for _ in range(3)]
    crossover = Span(location=1, dimension="height", line_color=BLUE, line_dash="dashed", line_width=1)

    p_bar = plot("Decode step at this context", "milliseconds per step", "", width=620, height=230,
                 y_range=FactorRange(*reversed(names)))
    rest = p_bar.hbar(y="method", left=0, right="rest_ms", height=0.6, source=bars, fill_color=GREY, line_color=None)
    attn = p_bar.hbar(y="method", left="rest_ms", right="total_ms", height=0.6, source=bars, fill_color=BLUE,
                      line_color=None)
    p_bar.add_layout(Legend(items=[LegendItem(label="weights, other kernels", renderers=[rest]),
                                   LegendItem(label="attention (cache, math)", renderers=[attn])],
                            orientation="horizontal", label_text_font_size="11px", padding=2, margin=4), "above")
    p_bar.ygrid.grid_line_color = None

    p_kv = plot("KV cache of one sequence (dashed: room on the GPU per sequence)", "context (tokens, log)",
                "GiB (log)", width=620, height=270, x_type="log", y_type="log")
    p_dec = plot("Decode step", "context (tokens, log)", "ms per step", width=310, height=260, x_type="log")
    p_pre = plot("Prefill of a prompt this long", "context (tokens, log)", "seconds (log)", width=310, height=260,
                 x_type="log", y_type="log")
    items = []
    for m in methods:
        style = dict(source=curves, line_width=2, color=COLOURS[m], line_dash=DASHES.get(m, "solid"))
        line = p_kv.line("context", f"kv_{m}", **style)
        p_dec.line("context", f"dec_{m}", **style)
        p_pre.line("context", f"pre_{m}", **style)
        items.append(LegendItem(label=lc.LABELS[m], renderers=[line]))
    p_kv.add_layout(Legend(items=items, orientation="horizontal", label_text_font_size="11px", padding=2,
                           margin=4, spacing=6), "above")
    p_kv.add_layout(room)
    p_dec.add_layout(crossover)
    for p, span in zip((p_kv, p_dec, p_pre), here):
        p.add_layout(span)
    for p in (p_kv, p_dec, p_pre):
        label_ticks(p.xaxis, {c: tokens_label(c) for c in CONTEXTS[::2]})

    numbers, table, note = readout(), readout(width=860), readout(width=860)

    def update() -> None:
        try:
            r = COMPUTE(PARAMS(model=model.value, gpu=gpu.value, context_tokens=context.value, batch=batch.value,
                               window_tokens=window.value, kv_budget_tokens=budget.value,
                               global_every=every.value))
        except ValueError as exc:          # a combination the sim refuses: say so, keep the plots as they were
            numbers.object = f'<p class="fig-warning">Not computed: {exc}.</p>'
            return
        c = r.params.context_tokens
        bars.data = {"method": names,
                     "rest_ms": [(r.decode_step_s[m] - r.decode_attention_s[m]) * 1e3 for m in methods],
                     "total_ms": [r.decode_step_s[m] * 1e3 for m in methods]}
        curves.data = {"context": r.contexts,
                       **{f"kv_{m}": r.kv_bytes_curve[m] / 2 ** 30 for m in methods},
                       **{f"dec_{m}": r.decode_curve_s[m] * 1e3 for m in methods},
                       **{f"pre_{m}": r.prefill_curve_s[m] for m in methods}}
        room.location = max(r.kv_room_bytes / r.params.batch / 2 ** 30, 1e-3)
        crossover.location = r.context_kv_equals_weights
        for span in here:
            span.location = c
        p_bar.title.text = f"Decode step at {tokens_label(c)} tokens, {r.params.batch} sequence(s)"
        full = r.decode_step_s["full"]
        numbers.object = rows_table([
            ("context", f"{c:,} tokens"),
            ("weights read per step", f"{r.weight_bytes / 1e9:,.2f} GB"),
            ("cache read per step, full", f"{r.params.batch * r.kv_bytes_per_seq['full'] / 1e9:,.2f} GB"),
            ("cache reads = weights at (dashed)", f"{r.context_kv_equals_weights:,.0f} tokens"),
            ("room for the cache", fmt_gib(r.kv_room_bytes)),
            ("full attention fits up to", f"{r.longest_fit['full']:,.0f} tokens"),
            ("at peak rates: weights", fmt_ms(r.roofline_s["weights"], 2)),
            ("cache (full)", fmt_ms(r.roofline_s["kv"], 2)),
            ("attention math (full)", fmt_ms(r.roofline_s["math"], 3)),
        ])
        rows = "".join(
            f"<tr><th>{lc.LABELS[m]}</th><td>{fmt_gib(r.kv_bytes_per_seq[m], 2)}</td>"
            f"<td>{'yes' if r.fits(m) else 'no'}</td><td>{fmt_ms(r.decode_step_s[m], 2)}</td>"
            f"<td>{full / r.decode_step_s[m]:.2f}x</td><td>{r.params.batch / r.decode_step_s[m]:,.0f}</td>"
            f"<td>{r.prefill_s[m]:,.2f} s</td></tr>" for m in methods)
        table.object = ('<table class="fig-numbers"><tr><th></th><th>cache per sequence</th><th>batch fits</th>'
                        f"<th>decode step</th><th>faster than full</th><th>tokens/s, all</th>"
                        f"<th>prefill of {tokens_label(c)}</th></tr>{rows}</table>")
        note.object = provenance(
            f"{r.model}, bf16 weights and activations; KV cache bf16 (fp8 for the fp8 row). Decode: one step "
            f"of {r.params.batch} sequence(s) at {c:,} cached tokens each, CUDA graphs replayed. Prefill: one "
            f"sequence, in chunks of {lc.PREFILL_CHUNK_TOKENS:,} tokens (assumed), output head on the last token; "
            f"eviction cuts the cache after a full prefill (as SnapKV does). Window with sinks keeps "
            f"{r.params.sink_tokens} first tokens. Hybrid: {r.global_layers} of {r.num_layers} layers attend to "
            f"everything, the rest to the window. Room for the cache: 90% of the GPU's memory less the weights "
            f"and a 2 GiB reserve (chapter 6). Dropped tokens are never read again: what that costs in quality "
            f"is measured, not modelled here (chapter text). {r.calibration_note}")

    watch([gpu, model, context, batch, window, budget, every], update)
    update()
    layout = pn.Column(
        pn.Row(pn.Column(gpu, model, context, batch, window, budget, every, numbers, width=CONTROL_WIDTH + 20),
               pn.Column(pn.pane.Bokeh(p_bar), pn.pane.Bokeh(p_kv),
                         pn.Row(pn.pane.Bokeh(p_dec), pn.pane.Bokeh(p_pre)))),
        table, note)
    return FigureView(FIGURE_ID, layout,
                      controls={"gpu": gpu, "model": model, "context": context, "batch": batch, "window": window,
                                "budget": budget, "global_every": every},
                      sources={"bars": bars, "curves": curves},
                      readouts={"numbers": numbers, "table": table, "note": note},
                      plots=[p_bar, p_kv, p_dec, p_pre])
