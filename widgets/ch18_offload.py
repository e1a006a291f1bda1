"""ch18-offload: bring an evicted prefix's KV back from another tier, or compute it again.

For a model on a GPU, the time to compute a prefix's KV again (its chunked prefill) against
the time to bring the same bytes back into HBM over each tier's link: CPU memory over
NVLink-C2C (GH200) and over PCIe Gen5 x16, another server's memory over 400 Gb/s RDMA, a
local NVMe drive and remote storage over 100 Gb/s Ethernet. Links at their specification's
rate (or a chosen share of it): each bring-back time is a lower bound.

Controls: model, GPU, KV format, prefix length, share of the link rate achieved.
One call: sim.prefix_cache.offload.
"""
from __future__ import annotations

import panel as pn
from bokeh.models import ColumnDataSource, Legend, LegendItem, Span

from sim import prefix_cache as pc
from widgets.base import (BLUE, CONTROL_WIDTH, GREEN, ORANGE, PURPLE, SKY, VERMILION, FigureView, fmt_gib, fmt_ms,
                          gpu_select, label_ticks, model_select, plot, provenance, readout, rows_table,
                          tokens_label, watch)

FIGURE_ID = "ch18-offload"
TITLE = "KV offload: bring a prefix back, or compute it again"
COMPUTE = pc.offload
PARAMS = pc.OffloadParams
STATES = {  # named states (widgets.state), as the chapter uses them
    "8b": {},
    "mha": {"model": "llama-2-7b"},
    "70b-fp8": {"model": "llama-3.1-70b", "kv_dtype": "fp8"},
}
LENGTHS = [2 ** k for k in range(10, 21)]              # 1K .. 1M tokens
SHARES = [1.0, 0.75, 0.5, 0.25]
COLOURS = {"c2c": GREEN, "pcie5": BLUE, "rdma": SKY, "nvme": ORANGE, "net100": VERMILION}


def build() -> FigureView:
    d = PARAMS()
    model = model_select(d.model, names=["llama-3.1-8b", "llama-3.1-70b", "llama-2-7b", "llama-3.2-1b",
                                         "mixtral-8x7b"])
    gpu = gpu_select(d.gpu, names=["H100-SXM", "H200", "A100-80GB", "B200"])
    dtype = pn.widgets.RadioButtonGroup(options={"KV bf16": "bf16", "KV fp8": "fp8"}, value=d.kv_dtype,
                                        width=CONTROL_WIDTH)
    length = pn.widgets.Select(label="Prefix (tokens)", options={f"{tokens_label(n)} ({n:,})": n for n in LENGTHS},
                               value=d.prefix_tokens, width=CONTROL_WIDTH)
    share = pn.widgets.Select(label="Share of each link's rate achieved", options={f"{s:.0%}": s for s in SHARES},
                              value=d.link_share, width=CONTROL_WIDTH)

    tiers = [name for name, *_ in pc.TIERS]
    labels = {name: label for name, label, *_ in pc.TIERS}
    curves = ColumnDataSource(data={"tokens": [], "recompute": [], **{t: [] for t in tiers}})
    here = Span(location=d.prefix_tokens, dimension="height", line_color="#888", line_width=1)
    p = plot("Bring the KV back (lines) or compute it again (thick)", "prefix (tokens, log)", "seconds (log)",
             width=620, height=360, x_type="log", y_type="log")
    again = p.line("tokens", "recompute", source=curves, line_width=4, color=PURPLE)
    items = [LegendItem(label="compute again (prefill)", renderers=[again])]
    for t in tiers:
        items.append(LegendItem(label=labels[t], renderers=[p.line("tokens", t, source=curves, line_width=2,
                                                                   color=COLOURS[t])]))
    p.add_layout(Legend(items=items, orientation="horizontal", label_text_font_size="11px", padding=2, margin=4,
                        spacing=6), "above")
    p.add_layout(here)
    label_ticks(p.xaxis, {n: tokens_label(n) for n in LENGTHS[::2]})

    numbers, table, note = readout(), readout(width=860), readout(width=860)

    def update() -> None:
        try:
            r = COMPUTE(PARAMS(model=model.value, gpu=gpu.value, kv_dtype=dtype.value, prefix_tokens=length.value,
                               link_share=share.value))
        except ValueError as exc:          # a combination the sim refuses: say so, keep the plot as it was
            numbers.object = f'<p class="fig-warning">Not computed: {exc}.</p>'
            return
        curves.data = {"tokens": r.lengths, "recompute": r.recompute_curve_s, **r.load_curve_s}
        here.location = r.params.prefix_tokens
        numbers.object = rows_table([
            ("prefix", f"{r.params.prefix_tokens:,} tokens"),
            ("its KV", f"{fmt_gib(r.kv_bytes, 2)} ({r.kv_bytes / 1e9:,.2f} GB)"),
            ("KV a token", f"{r.kv_bytes_per_token / 1024:,.0f} KiB"),
            ("compute again", fmt_ms(r.recompute_s)),
        ])

        def even(x: float) -> str:
            return "every length" if x == 0 else "no length up to 1M" if x == float("inf") else f"{x:,.0f} tokens"
        rows = "".join(
            f"<tr><th>{label}</th><td>{rate * r.params.link_share / 1e9:,.1f} GB/s</td>"
            f"<td>{fmt_ms(r.load_s[name])}</td><td>{r.recompute_s / r.load_s[name]:,.1f}x</td>"
            f"<td>{even(r.break_even_tokens[name])}</td></tr>" for name, label, rate, _ in pc.TIERS)
        table.object = ('<table class="fig-numbers"><tr><th>bring back from</th><th>link rate</th>'
                        f"<th>{tokens_label(r.params.prefix_tokens)} tokens' KV</th><th>quicker than computing</th>"
                        f"<th>quicker from</th></tr>{rows}</table>")
        sources = "; ".join(f"{label}: {source}" for _, label, _, source in pc.TIERS)
        note.object = provenance(
            f"{r.model} on one {r.gpu}, bf16 weights, {r.params.kv_dtype} KV cache. Compute again: the prefix's "
            f"prefill from nothing, in chunks of 8,192 tokens (chapter 17). Bring back: the prefix's KV bytes over "
            f"the link at {r.params.link_share:.0%} of its rate (assumed); no latency, protocol or software cost, "
            f"and nothing overlapped, so these times are lower bounds. Rates per direction: {sources}. "
            f"{r.calibration_note}")

    watch([model, gpu, dtype, length, share], update)
    update()
    layout = pn.Column(
        pn.Row(pn.Column(model, gpu, dtype, length, share, numbers, width=CONTROL_WIDTH + 20),
               pn.pane.Bokeh(p)),
        table, note)
    return FigureView(FIGURE_ID, layout,
                      controls={"model": model, "gpu": gpu, "kv_dtype": dtype, "prefix": length, "link_share": share},
                      sources={"curves": curves},
                      readouts={"numbers": numbers, "table": table, "note": note},
                      plots=[p])
