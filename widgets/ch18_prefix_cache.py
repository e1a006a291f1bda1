"""ch18-prefix-cache: a chat and document workload through a prefix cache of every size.

A seeded workload (conversations arriving at a rate, each a few turns apart, some opening
with one of a few documents, every prompt beginning with the same system prompt) runs
through a cache of KV blocks that evicts the least recently used. The left plot gives the
share of all prompt tokens the cache finds at each size, for 16-token blocks named by
chained hashes (vLLM) and token by token (a radix tree, SGLang), against the share a cache
with room for everything would find; the right plot gives every request's time to first
token with and without the cache of the chosen size.

Controls: model, GPU, cache size, conversations a second, turns, think time, system prompt,
documents' share and length. One call: sim.prefix_cache.prefix_cache.
"""
from __future__ import annotations

import numpy as np
import panel as pn
from bokeh.models import ColumnDataSource, Legend, LegendItem, Span

from sim import prefix_cache as pc
from widgets.base import (BLUE, CONTROL_WIDTH, GREY, ORANGE, FigureView, fmt_gib, fmt_ms, gpu_select, label_ticks,
                          model_select, plot, provenance, readout, rows_table, tokens_label, watch)

FIGURE_ID = "ch18-prefix-cache"
TITLE = "Prefix caching across requests: what a cache of each size finds in a chat workload"
COMPUTE = pc.prefix_cache
PARAMS = pc.PrefixCacheParams
STATES = {  # named states (widgets.state), as the chapter uses them
    "chat": {},
    "documents": {"document_share": 0.8, "document_tokens": 32768, "cache_tokens": 262144},
    "agents": {"turns": 12, "think_s": 5.0, "rate": 0.3},
}
CACHE_TOKENS = [2 ** k for k in range(14, 22)]          # 16K .. 2M tokens
RATES = [0.1, 0.3, 1.0, 3.0, 10.0]
THINK_S = [5.0, 15.0, 30.0, 60.0, 120.0, 300.0]
SYSTEM = [0, 256, 1024, 4096, 8192]
DOC_TOKENS = [2048, 8192, 32768]
MS_TICKS = [1, 3, 10, 30, 100, 300, 1000, 3000, 10000, 30000]
TICKS = {2 ** k: (f"{2 ** (k - 20)}M" if k >= 20 else f"{2 ** (k - 10)}K") for k in range(12, 25, 2)}


def build() -> FigureView:
    d = PARAMS()
    model = model_select(d.model, names=["llama-3.1-8b", "llama-3.1-70b", "llama-3.2-1b"])
    gpu = gpu_select(d.gpu, names=["H100-SXM", "H200", "A100-80GB", "B200"])
    cache = pn.widgets.Select(label="Cache size (tokens of KV)", options={tokens_label(t): t for t in CACHE_TOKENS},
                              value=d.cache_tokens, width=CONTROL_WIDTH)
    rate = pn.widgets.Select(label="New conversations a second", options={f"{r:g}": r for r in RATES},
                             value=d.rate_per_s, width=CONTROL_WIDTH)
    turns = pn.widgets.IntSlider(label="Turns per conversation (mean)", start=1, end=12, value=int(d.turns),
                                 width=CONTROL_WIDTH)
    think = pn.widgets.Select(label="Time between turns (mean)", options={f"{t:g} s": t for t in THINK_S},
                              value=d.think_s, width=CONTROL_WIDTH)
    system = pn.widgets.Select(label="System prompt (tokens)", options={f"{s:,}": s for s in SYSTEM},
                               value=d.system_tokens, width=CONTROL_WIDTH)
    share = pn.widgets.FloatSlider(label="Conversations with a document", start=0.0, end=1.0, step=0.1,
                                   value=d.document_share, width=CONTROL_WIDTH)
    doc = pn.widgets.Select(label="Document length (tokens)", options={f"{t:,}": t for t in DOC_TOKENS},
                            value=d.document_tokens, width=CONTROL_WIDTH)

    curves = ColumnDataSource(data={"tokens": [], "blocks": [], "radix": []})
    ttft = ColumnDataSource(data={"share": [], "cached_ms": [], "uncached_ms": []})
    here = Span(location=d.cache_tokens, dimension="height", line_color="#444", line_width=1)
    room = Span(location=1, dimension="height", line_color="#444", line_dash="dashed", line_width=1)
    ceiling = Span(location=1, dimension="width", line_color=GREY, line_dash="dashed", line_width=1)

    p_hit = plot("Share of prompt tokens found in the cache (dashed: room for everything)", "cache size (tokens, log)",
                 "share of prompt tokens", width=460, height=300, x_type="log", y_range=(0, 1))
    blocks = p_hit.line("tokens", "blocks", source=curves, line_width=2, color=BLUE)
    radix = p_hit.line("tokens", "radix", source=curves, line_width=2, color=ORANGE, line_dash="dashed")
    p_hit.add_layout(Legend(items=[LegendItem(label="16-token blocks, hashed (vLLM)", renderers=[blocks]),
                                   LegendItem(label="token by token, radix tree (SGLang)", renderers=[radix])],
                            orientation="horizontal", label_text_font_size="11px", padding=2, margin=4), "above")
    for span in (here, room, ceiling):
        p_hit.add_layout(span)
    label_ticks(p_hit.xaxis, TICKS)

    p_ttft = plot("Time to first token, every request", "milliseconds (log)", "share of requests at most this",
                  width=400, height=300, x_type="log", y_range=(0, 1))
    with_cache = p_ttft.line("cached_ms", "share", source=ttft, line_width=2, color=BLUE)
    without = p_ttft.line("uncached_ms", "share", source=ttft, line_width=2, color=GREY, line_dash="dashed")
    label_ticks(p_ttft.xaxis, {ms: f"{ms:,}" for ms in MS_TICKS})
    p_ttft.add_layout(Legend(items=[LegendItem(label="with this cache", renderers=[with_cache]),
                                    LegendItem(label="no cache", renderers=[without])],
                             orientation="horizontal", label_text_font_size="11px", padding=2, margin=4), "above")

    numbers, note = readout(width=860), readout(width=860)

    def update() -> None:
        try:
            r = COMPUTE(PARAMS(model=model.value, gpu=gpu.value, cache_tokens=cache.value, rate_per_s=rate.value,
                               turns=float(turns.value), think_s=think.value, system_tokens=system.value,
                               document_share=share.value, document_tokens=doc.value))
        except ValueError as exc:          # a combination the sim refuses: say so, keep the plots as they were
            numbers.object = f'<p class="fig-warning">Not computed: {exc}.</p>'
            return
        drawn = ~np.isnan(r.hit_rate_curve)          # (a cache smaller than the largest request: not drawn)
        curves.data = {"tokens": r.capacities_tokens[drawn], "blocks": r.hit_rate_curve[drawn],
                       "radix": r.hit_rate_curve_radix[drawn]}
        n = r.requests
        ttft.data = {"share": np.arange(1, n + 1) / n, "cached_ms": np.sort(r.ttft_s) * 1e3,
                     "uncached_ms": np.sort(r.ttft_s_uncached) * 1e3}
        here.location = r.params.cache_tokens
        room.location = r.kv_room_tokens
        ceiling.location = r.hit_rate_unbounded
        (p50, q50), (p99, q99) = r.ttft_percentiles_s["p50"], r.ttft_percentiles_s["p99"]
        numbers.object = rows_table([
            ("requests", f"{n:,} ({r.prompt_tokens:,} prompt tokens)"),
            ("found, blocks", f"{100 * r.hit_rate:.1f}%"),
            ("found, token by token", f"{100 * r.hit_rate_radix:.1f}%"),
            ("found with room for all", f"{100 * r.hit_rate_unbounded:.1f}%"),
            ("cache size", f"{r.params.cache_tokens:,} tokens = {fmt_gib(r.params.cache_tokens * r.kv_bytes_per_token)}"),
            ("90% of that from", f"{r.capacity_for_most_tokens:,.0f} tokens"),
            ("GPU's room for KV (dashed)", f"{r.kv_room_tokens:,.0f} tokens"),
            ("prefill time, all requests", f"{r.prefill_s:,.1f} s (no cache {r.prefill_s_uncached:,.1f} s)"),
            ("TTFT median", f"{fmt_ms(p50)} (no cache {fmt_ms(q50)})"),
            ("TTFT P99", f"{fmt_ms(p99)} (no cache {fmt_ms(q99)})"),
        ])
        p = r.params
        note.object = provenance(
            f"{r.model} on one {r.gpu}, bf16 weights, {p.kv_dtype} KV cache ({r.kv_bytes_per_token / 1024:,.0f} KiB "
            f"a token). Workload (seed {p.seed}): {p.conversations} conversations starting at {p.rate_per_s:g} a second "
            f"(Poisson), a geometric number of turns with mean {p.turns:g}, exponential gaps between turns with "
            f"mean {p.think_s:g} s; messages of {p.user_tokens // 2}-{p.user_tokens + p.user_tokens // 2} tokens and "
            f"answers of {p.output_tokens // 2}-{p.output_tokens + p.output_tokens // 2} (uniform); a conversation "
            f"opens with one of {p.documents} documents with probability {p.document_share:g}, the k-th chosen in "
            f"proportion to 1/k (assumed). Requests run one at a time in arrival order and the cache keeps only "
            f"finished requests' blocks (a running batch would pin more). Time to first token: the prefill of the "
            f"tokens not found, on an otherwise idle GPU, in chunks of 8,192 tokens. Cache sizes below the largest "
            f"request ({r.largest_request_tokens:,} tokens) are not drawn. Room for KV: 90% of the GPU's memory less "
            f"the weights and a 2 GiB reserve (chapter 6). {r.calibration_note}")

    watch([model, gpu, cache, rate, turns, think, system, share, doc], update)
    update()
    layout = pn.Column(
        pn.Row(pn.Column(model, gpu, cache, rate, turns, think, system, share, doc, width=CONTROL_WIDTH + 20),
               pn.Column(pn.Row(pn.pane.Bokeh(p_hit), pn.pane.Bokeh(p_ttft)), numbers)),
        note)
    return FigureView(FIGURE_ID, layout,
                      controls={"model": model, "gpu": gpu, "cache_tokens": cache, "rate": rate, "turns": turns,
                                "think_s": think, "system": system, "document_share": share, "document_tokens": doc},
                      sources={"curves": curves, "ttft": ttft},
                      readouts={"numbers": numbers, "note": note},
                      plots=[p_hit, p_ttft])
