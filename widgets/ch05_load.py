"""ch05-load: a loaded server, where percentiles and SLO attainment mean something.

Requests arrive at random (Poisson) at a chosen mean rate and run through the
continuous-batching scheduler of chapter 4. Under load a request's time to first token
includes its wait for the other requests' steps, and its time per output token includes
the prompt chunks that share its steps, so both spread out into distributions: the
figure shows them as histograms with the SLO's limits, their P50 and P99, each request's
TTFT against its arrival time, and the share of requests that meet both limits.

Controls: arrival rate, how prompts are prefilled (whole, or in chunks of a token
budget), GPU. One call: sim.latency.simulate_load. The seed fixes the arrivals and
lengths, so the figure is the same on every load.
"""
from __future__ import annotations

import panel as pn
from bokeh.models import ColumnDataSource, DataRange1d, FixedTicker, Range1d, Span

from sim.latency import LoadParams, simulate_load
from widgets.base import (BLUE, CONTROL_WIDTH, GREEN, ORANGE, VERMILION, FigureView, gpu_select, inset_legend,
                          legend_glyph, plot, provenance, readout, rows_table, watch)

FIGURE_ID = "ch05-load"
TITLE = "A loaded server: TTFT and TPOT of every request, their P50 and P99, and the share meeting the SLO"
COMPUTE = simulate_load
PARAMS = LoadParams
STATES = {  # named states (widgets.state), as the chapter uses them
    "rate-40": {"rate": 40},
    "no-prefill": {"prefill": 0}}

DEFAULTS = LoadParams()
GPUS = ["H100-SXM", "H200", "A100-80GB", "B200"]
PREFILL = {"whole": 0, "512": 512, "2,048": 2048}   # tokens per step; 0: each prompt whole in one step


def _ms(s: float) -> str:
    ms = s * 1e3
    return f"{s:,.2f} s" if ms >= 1000 else (f"{ms:,.0f} ms" if ms >= 10 else f"{ms:.1f} ms")


def _histogram(title: str, x_label: str, lo_ms: float, hi_ms: float, ticks: list, colour: str,
               source: ColumnDataSource, limit_ms: float):
    p = plot(title, x_label, "requests", x_type="log", width=300, height=230, x_range=Range1d(lo_ms, hi_ms),
             y_range=DataRange1d(start=0))
    p.xaxis.ticker = FixedTicker(ticks=ticks)
    bars = p.quad(left="left", right="right", bottom=0, top="count", source=source, fill_color=colour,
                  line_color="white", alpha=0.85)
    p.add_layout(Span(location=limit_ms, dimension="height", line_color=VERMILION, line_width=2))
    limit = legend_glyph(p, "line", line_color=VERMILION, line_width=2)        # the Span's legend entry
    inset_legend(p, [("requests", bars), ("limit", limit)])
    return p


def build() -> FigureView:
    rate = pn.widgets.IntSlider(label="Arrival rate (requests/s)", start=4, end=40, step=1,
                                value=int(DEFAULTS.rate_per_s), width=CONTROL_WIDTH)
    prefill = pn.widgets.RadioButtonGroup(options=PREFILL, value=DEFAULTS.token_budget if DEFAULTS.chunked_prefill
                                          else 0, width=CONTROL_WIDTH)
    prefill_label = pn.pane.HTML("Prompt tokens per step (whole: no chunking)", width=CONTROL_WIDTH,
                                 margin=(6, 10, 0, 10))
    gpu = gpu_select(DEFAULTS.gpu, names=GPUS)

    ttft_hist = ColumnDataSource(data={"left": [], "right": [], "count": []})
    tpot_hist = ColumnDataSource(data={"left": [], "right": [], "count": []})
    met = ColumnDataSource(data={"arrival_s": [], "ttft_ms": []})
    missed = ColumnDataSource(data={"arrival_s": [], "ttft_ms": []})

    slo = DEFAULTS.slo
    p_ttft = _histogram("Time to first token", "TTFT (ms, log scale)", 10, 30_000, [10, 100, 1000, 10_000], BLUE,
                        ttft_hist, slo.ttft_s * 1e3)
    p_tpot = _histogram("Time per output token", "TPOT (ms, log scale)", 3, 300, [3, 10, 30, 100, 300], ORANGE,
                        tpot_hist, slo.tpot_s * 1e3)
    p_time = plot("Each request's TTFT against when it arrived", "arrival time (s)", "TTFT (ms, log scale)",
                  y_type="log", width=600, height=220, y_range=Range1d(10, 20_000))
    r_met = p_time.scatter("arrival_s", "ttft_ms", source=met, size=7, color=GREEN)
    r_missed = p_time.scatter("arrival_s", "ttft_ms", source=missed, size=7, color=VERMILION, marker="x")
    p_time.add_layout(Span(location=slo.ttft_s * 1e3, dimension="width", line_color=VERMILION, line_dash="dashed"))
    r_limit = legend_glyph(p_time, "line", line_color=VERMILION, line_dash="dashed")
    inset_legend(p_time, [("meets both limits", r_met), ("misses a limit", r_missed), ("TTFT limit", r_limit)],
                 "top_left")

    numbers, note = readout(), readout(width=860)

    def update() -> None:
        budget = prefill.value
        r = simulate_load(LoadParams(gpu=gpu.value, rate_per_s=float(rate.value), chunked_prefill=budget > 0,
                                     token_budget=budget or DEFAULTS.token_budget))
        m = r.metrics
        ttft_hist.data = {"left": r.ttft_edges_s[:-1] * 1e3, "right": r.ttft_edges_s[1:] * 1e3,
                          "count": r.ttft_counts}
        tpot_hist.data = {"left": r.tpot_edges_s[:-1] * 1e3, "right": r.tpot_edges_s[1:] * 1e3,
                          "count": r.tpot_counts}
        ok = r.meets_slo
        met.data = {"arrival_s": r.arrival_s[ok], "ttft_ms": r.ttft_s[ok] * 1e3}
        missed.data = {"arrival_s": r.arrival_s[~ok], "ttft_ms": r.ttft_s[~ok] * 1e3}
        numbers.object = rows_table([
            ("offered load", f"{r.rate_per_s:.0f} requests/s"),
            ("mean batch", f"{r.mean_batch:.1f} requests"),
            ("TTFT P50 / P99", f"{_ms(m.ttft_p50_s)} / {_ms(m.ttft_p99_s)}"),
            ("TPOT P50 / P99", f"{_ms(m.tpot_p50_s)} / {_ms(m.tpot_p99_s)}"),
            ("miss TTFT / TPOT limit", f"{r.ttft_misses} / {r.tpot_misses} requests"),
            ("meet both limits", f"{m.slo_attainment:.0%} ({'at least' if r.meets_target else 'below'} "
                                 f"{DEFAULTS.target_attainment:.0%})"),
            ("output tokens/s", f"{m.throughput_tokens_per_s:,.0f}"),
        ])
        note.object = provenance(r.note)

    watch([rate, prefill, gpu], update)
    update()
    layout = pn.Column(
        pn.Row(pn.Column(rate, prefill_label, prefill, gpu, numbers, width=CONTROL_WIDTH + 20),
               pn.Column(pn.Row(pn.pane.Bokeh(p_ttft), pn.pane.Bokeh(p_tpot)), pn.pane.Bokeh(p_time))),
        note)
    return FigureView(FIGURE_ID, layout, controls={"rate": rate, "prefill": prefill, "gpu": gpu},
                      sources={"ttft_hist": ttft_hist, "tpot_hist": tpot_hist, "met": met, "missed": missed},
                      readouts={"numbers": numbers, "note": note}, plots=[p_ttft, p_tpot, p_time])
