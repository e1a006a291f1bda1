"""ch19-disagg: colocated GPUs against P prefill + D decode GPUs, per GPU, as load grows.

One workload (log-uniform prompt and answer lengths around the chosen ones, Poisson
arrivals) under a TTFT and a TPOT limit. Colocated: every GPU runs chapter 04's scheduler
with chunked prefill (chapter 05's loaded server). Disaggregated: one GPU of each pool
simulated with the same scheduler, prefill only or decode only, and the prompt's KV moved
between them over the chosen link. Plots the share of requests meeting both limits against
the offered rate per GPU for colocated and the best P:D split, the goodput per GPU of every
split, and the time to move a prompt's KV against its prefill, by link.

Controls: model, GPU, prompt and answer lengths, the two limits, the link.
One call: sim.disagg.disagg.
"""
from __future__ import annotations

import panel as pn
from bokeh.models import ColumnDataSource, FactorRange, Legend, LegendItem, Range1d, Span

from sim import disagg as dg
from widgets.base import (BLUE, CONTROL_WIDTH, GREEN, GREY, ORANGE, PURPLE, SKY, VERMILION, FigureView, fmt_gib,
                          fmt_ms, gpu_select, label_ticks, model_select, plot, provenance, readout, rows_table,
                          tokens_label, watch)

FIGURE_ID = "ch19-disagg"
TITLE = "Disaggregated prefill and decode: goodput per GPU against colocated serving"
COMPUTE = dg.disagg
PARAMS = dg.DisaggParams
STATES = {  # named states (widgets.state), as the chapter uses them
    "tight-tpot": {"prompt": 4096, "tpot": 0.015},
    "short-prompts": {"prompt": 256},
    "slow-link": {"prompt": 4096, "tpot": 0.015, "link": "eth25"},
}
PROMPTS = [256, 1024, 4096, 16384]
OUTPUTS = [64, 256, 1024]
TTFTS = [0.1, 0.2, 0.45, 1.0, 2.0]
TPOTS = [0.01, 0.015, 0.02, 0.04, 0.1]
COLOURS = {"nvlink": GREEN, "ib400": BLUE, "roce200": SKY, "eth25": VERMILION}


def _split(key: str) -> str:
    """"colocated", or "2:1" -> "2P:1D"."""
    return key if key == "colocated" else "{}P:{}D".format(*key.split(":"))


def build() -> FigureView:
    d = PARAMS()
    model = model_select(d.model, names=["llama-3.1-8b", "llama-2-7b", "llama-3.2-1b"])
    gpu = gpu_select(d.gpu, names=["H100-SXM", "H200", "A100-80GB", "B200"])
    prompt = pn.widgets.Select(label="Prompt (tokens; half to twice this)",
                               options={f"{tokens_label(n)} ({n:,})": n for n in PROMPTS}, value=d.prompt_tokens,
                               width=CONTROL_WIDTH)
    output = pn.widgets.Select(label="Answer (tokens; half to twice this)", options={f"{n:,}": n for n in OUTPUTS},
                               value=d.output_tokens, width=CONTROL_WIDTH)
    ttft = pn.widgets.Select(label="TTFT limit", options={fmt_ms(s, 0): s for s in TTFTS}, value=d.ttft_slo_s,
                             width=CONTROL_WIDTH)
    tpot = pn.widgets.Select(label="TPOT limit", options={fmt_ms(s, 0): s for s in TPOTS}, value=d.tpot_slo_s,
                             width=CONTROL_WIDTH)
    link = pn.widgets.Select(label="Link between the pools", options={label: n for n, label, *_ in dg.LINKS},
                             value=d.link, width=CONTROL_WIDTH)

    curves = ColumnDataSource(data={"rate": [], "colocated": [], "best": []})
    a = plot("Requests meeting both limits", "offered requests/s per GPU (log)", "share of requests", width=420,
             height=300, x_type="log", y_range=Range1d(-0.03, 1.05))
    col_line = a.line("rate", "colocated", source=curves, line_width=3, color=BLUE)
    best_line = a.line("rate", "best", source=curves, line_width=3, color=ORANGE, line_dash="dashed")
    target = Span(location=d.target_attainment, dimension="width", line_color=GREY, line_dash="dotted", line_width=2)
    a.add_layout(target)
    best_item = LegendItem(label="best P:D split", renderers=[best_line])
    a.add_layout(Legend(items=[LegendItem(label="colocated", renderers=[col_line]), best_item],
                        location="bottom_left", label_text_font_size="11px", padding=2, margin=4, spacing=2))

    names = ["colocated"] + [_split(dg.split_key(s)) for s in dg.splits(d.max_gpus)]
    bars = ColumnDataSource(data={"split": names, "goodput": [0.0] * len(names), "colour": [GREY] * len(names)})
    b = plot("Goodput per GPU", "requests/s per GPU", "", width=300, height=300, y_range=FactorRange(*names[::-1]))
    b.hbar(y="split", right="goodput", height=0.7, source=bars, fill_color="colour", line_color=None)

    kinds = [n for n, *_ in dg.LINKS]
    moves = ColumnDataSource(data={"tokens": [], "prefill": [], **{k: [] for k in kinds}})
    c = plot("Move a prompt's KV (lines) or prefill it (thick)", "prompt (tokens, log)", "seconds (log)", width=420,
             height=300, x_type="log", y_type="log")
    items = [LegendItem(label="prefill", renderers=[c.line("tokens", "prefill", source=moves, line_width=4,
                                                           color=PURPLE)])]
    for k, label, *_ in dg.LINKS:
        items.append(LegendItem(label=label, renderers=[c.line("tokens", k, source=moves, line_width=2,
                                                               color=COLOURS[k])]))
    c.add_layout(Legend(items=items, orientation="horizontal", label_text_font_size="10px", padding=2, margin=4,
                        spacing=4), "above")
    here = Span(location=d.prompt_tokens, dimension="height", line_color="#888", line_width=1)
    c.add_layout(here)
    label_ticks(c.xaxis, {n: tokens_label(n) for n in (128, 1024, 8192, 65536)})

    numbers, note = readout(), readout(width=860)

    def update() -> None:
        try:
            r = COMPUTE(PARAMS(model=model.value, gpu=gpu.value, prompt_tokens=prompt.value,
                               output_tokens=output.value, ttft_slo_s=ttft.value, tpot_slo_s=tpot.value,
                               link=link.value))
        except ValueError as exc:          # a combination the sim refuses: say so, keep the plots as they were
            numbers.object = f'<p class="fig-warning">Not computed: {exc}.</p>'
            return
        best = r.best
        curves.data = {"rate": r.rates_per_gpu, "colocated": r.attainment["colocated"], "best": r.attainment[best]}
        best_item.label = {"value": f"best split, {_split(best)}"}
        keys = ["colocated"] + [dg.split_key(s) for s in dg.splits(r.params.max_gpus)]
        bars.data = {"split": [_split(k) for k in keys], "goodput": [r.goodput_per_gpu[k] for k in keys],
                     "colour": [BLUE if k == "colocated" else ORANGE if k == best else GREY for k in keys]}
        moves.data = {"tokens": r.prompt_sweep, "prefill": r.prefill_sweep_s, **r.transfer_sweep_s}
        here.location = r.params.prompt_tokens
        col, dis = r.goodput_per_gpu["colocated"], r.goodput_per_gpu[best]
        verdict = ("neither meets the limits at the lowest rate" if col == dis == 0 else
                   f"splitting gives {dis / col - 1:+.0%} per GPU" if col else "only splitting meets the limits")
        moved = r.transfer_s[r.params.link]
        numbers.object = rows_table([
            ("limits", f"TTFT {fmt_ms(r.params.ttft_slo_s, 0)}, TPOT {fmt_ms(r.params.tpot_slo_s, 0)}"),
            ("goodput, colocated", f"{col:,.1f} req/s per GPU"),
            (f"goodput, {_split(best)}", f"{dis:,.1f} req/s per GPU"),
            ("so", verdict),
            (f"KV of a {r.params.prompt_tokens:,}-token prompt", f"{fmt_gib(r.kv_bytes, 2)}"),
            ("moved over the link", fmt_ms(moved)),
            ("its prefill", fmt_ms(r.prefill_s)),
            ("transfer's share of an idle TTFT", f"{moved / (moved + r.prefill_s):.0%}"),
        ])
        sources = "; ".join(f"{label}: {source}" for _, label, _, source in dg.LINKS)
        note.object = provenance(
            f"{r.model} in bf16 on {r.gpu} GPUs. Workload (an assumption, not a trace): {r.params.requests} requests "
            f"a run, Poisson arrivals, prompts {r.params.prompt_tokens // 2:,}-{r.params.prompt_tokens * 2:,} and "
            f"answers {r.params.output_tokens // 2:,}-{r.params.output_tokens * 2:,} tokens (log-uniform); "
            f"{r.params.max_batch} slots a GPU, chunked prefill of {r.params.token_budget:,} tokens a step. "
            f"Colocated: chapter 05's simulation at each rate. Split: one prefill GPU and one decode GPU simulated per "
            f"rate (requests spread at random), each request's latencies interpolated between rates, its TTFT plus "
            f"its KV's transfer after its prefill (no overlap, no contention: a lower bound). Above a GPU's capacity "
            f"bound (prefill {r.capacities.prefill:,.1f}, decode {r.capacities.decode:,.1f} req/s) every request "
            f"counts as late. Goodput: the highest rate up to which {r.params.target_attainment:.0%} meet both "
            f"limits (DistServe). Link rates per direction: {sources}. {r.calibration_note}")

    watch([model, gpu, prompt, output, ttft, tpot, link], update)
    update()
    layout = pn.Column(
        pn.Row(pn.Column(model, gpu, prompt, output, ttft, tpot, link, width=CONTROL_WIDTH + 20),
               pn.Column(pn.Row(pn.pane.Bokeh(a), pn.pane.Bokeh(b)), pn.Row(pn.pane.Bokeh(c), numbers))),
        note)
    return FigureView(FIGURE_ID, layout,
                      controls={"model": model, "gpu": gpu, "prompt": prompt, "output": output, "ttft": ttft,
                                "tpot": tpot, "link": link},
                      sources={"curves": curves, "bars": bars, "moves": moves},
                      readouts={"numbers": numbers, "note": note},
                      plots=[a, b, c])
