"""ch20-service: three minutes of a service, from arrivals through rate limits and replicas to cost.

Tenant A's traffic (Poisson, bursts, or a daily cycle compressed into the run) and a
second tenant B go through a token bucket per tenant, to replicas that each run chapter 04's
scheduler, resized by an autoscaler whose new replicas serve only after their weights are
loaded. Plots the offered, rejected and preempted requests per second against the capacity
the serving replicas hold at the P99 limits, the P50 and P99 of TTFT and TPOT of the requests
arriving in each 10 s, and the replicas serving and billed.

Controls: traffic, mean rate, peak-to-mean, tenant B, token limit, autoscaler signal, weight
source, preemption mode, a replica lost, GPU price. One call: sim.service.service.
"""
from __future__ import annotations

import panel as pn
from bokeh.models import ColumnDataSource, Legend, LegendItem, Range1d, Span

from sim import service as sv
from widgets.base import (BLUE, CONTROL_WIDTH, GREEN, GREY, ORANGE, PURPLE, VERMILION, FigureView, plot, provenance,
                          readout, rows_table, watch)

FIGURE_ID = "ch20-service"
TITLE = "Operating a service: traffic, rate limits, replicas and cost"
COMPUTE = sv.service
PARAMS = sv.ServiceParams
STATES = {  # named states (widgets.state), as the chapter uses them
    "long-prompt-storm": {"tenant_b": "storm"},
    "cache-thrashing": {"tenant_b": "long-contexts"},
    "replica-lost": {"lose": 95.0},
}
TRAFFIC = {"Poisson (steady)": "poisson", "bursts, once a minute": "bursty", "a daily cycle, compressed": "daily"}
RATES = [2.0, 4.0, 6.0, 8.0, 12.0]
PEAKS = [1.5, 2.0, 3.0, 5.0]
TENANTS = {"light, like tenant A": "light", "a long-prompt storm, 60-120 s": "storm",
           "long contexts, long answers": "long-contexts"}
LIMITS = {"none": 0.0, "20,000 tokens/s": 20_000.0, "40,000 tokens/s": 40_000.0, "80,000 tokens/s": 80_000.0}
SIGNALS = {"requests in a replica (target 64)": "concurrency", "requests waiting (target 4)": "queue",
           "KV cache in use (target 80%)": "kv", "P99 TTFT (target: its limit)": "ttft"}
PREEMPTIONS = {"recompute": "recompute", "swap to CPU memory": "swap"}
LOSSES = {"never": 0.0, "at 45 s": 45.0, "at 95 s (in a burst)": 95.0}
PRICES = [2.0, 3.0, 4.0, 6.0]


def _steps(times, values, end: float) -> tuple:
    """A step line: each value holds until the next time; the last until `end`."""
    xs, ys = [], []
    for i, (t, v) in enumerate(zip(times, values)):
        nxt = times[i + 1] if i + 1 < len(times) else end
        xs += [float(t), float(nxt)]
        ys += [float(v), float(v)]
    return xs, ys


def build() -> FigureView:
    d = PARAMS()
    w = CONTROL_WIDTH
    traffic = pn.widgets.Select(label="Tenant A's traffic", options=TRAFFIC, value=d.arrivals, width=w)
    rate = pn.widgets.Select(label="Tenant A's mean rate", options={f"{r:g} requests/s": r for r in RATES},
                             value=d.rate_per_s, width=w)
    peak = pn.widgets.Select(label="Peak to mean", options={f"{k:g}x": k for k in PEAKS},
                             value=d.peak_to_mean, width=w)
    tenant_b = pn.widgets.Select(label="Tenant B", options=TENANTS, value="light", width=w)
    limit = pn.widgets.Select(label="Token limit per tenant (10 s bucket)", options=LIMITS,
                              value=d.tenant_tokens_per_s, width=w)
    signal = pn.widgets.Select(label="Autoscaler signal", options=SIGNALS, value=d.signal, width=w)
    weights = pn.widgets.Select(label="New replica's weights from", options={lbl: n for n, lbl, *_ in sv.WEIGHT_SOURCES},
                                value=d.weights_from, width=w)
    preempt = pn.widgets.Select(label="Preemption", options=PREEMPTIONS, value=d.preemption, width=w)
    lose = pn.widgets.Select(label="Lose a replica", options=LOSSES, value=0.0, width=w)
    price = pn.widgets.Select(label="GPU price (an assumption)", options={f"${x:g} per GPU-hour": x for x in PRICES},
                              value=d.gpu_price_per_hour, width=w)

    series = ColumnDataSource(data={"t": [], "offered": [], "rejected": [], "preempted": [], "ttft50": [],
                                    "ttft99": [], "tpot50": [], "tpot99": []})
    cap = ColumnDataSource(data={"t": [], "capacity": []})
    a = plot("Requests per second", "time (s)", "requests/s", width=420, height=280)
    offered = a.vbar(x="t", top="offered", width=d.bin_s * 0.9, source=series, fill_color=BLUE, fill_alpha=0.35,
                     line_color=None)
    rejected = a.vbar(x="t", top="rejected", width=d.bin_s * 0.45, source=series, fill_color=VERMILION,
                      line_color=None)
    preempted = a.line("t", "preempted", source=series, line_width=2, color=PURPLE)
    capacity = a.line("t", "capacity", source=cap, line_width=3, color=GREEN, line_dash="dashed")
    a.add_layout(Legend(items=[LegendItem(label="offered", renderers=[offered]),
                               LegendItem(label="rejected", renderers=[rejected]),
                               LegendItem(label="preempted", renderers=[preempted]),
                               LegendItem(label="P99 capacity serving", renderers=[capacity])],
                        orientation="horizontal", label_text_font_size="10px", padding=2, margin=2, spacing=4),
                 "above")

    b = plot("Latency of the requests arriving in each 10 s", "arrival time (s)", "seconds (log)", width=420,
             height=280, y_type="log", y_range=Range1d(2e-3, 300.0))
    lines = [(key, label, colour, dash) for key, label, colour, dash in (
        ("ttft50", "TTFT P50", ORANGE, "solid"), ("ttft99", "TTFT P99", ORANGE, "dashed"),
        ("tpot50", "TPOT P50", BLUE, "solid"), ("tpot99", "TPOT P99", BLUE, "dashed"))]
    items = [LegendItem(label=label, renderers=[b.line("t", key, source=series, line_width=2, color=colour,
                                                       line_dash=dash)]) for key, label, colour, dash in lines]
    b.add_layout(Legend(items=items, orientation="horizontal", label_text_font_size="10px", padding=2, margin=2,
                        spacing=4), "above")
    ttft_limit = Span(location=d.ttft_slo_s, dimension="width", line_color=ORANGE, line_dash="dotted", line_width=1)
    tpot_limit = Span(location=d.tpot_slo_s, dimension="width", line_color=BLUE, line_dash="dotted", line_width=1)
    b.add_layout(ttft_limit)
    b.add_layout(tpot_limit)

    fleet = ColumnDataSource(data={"t": [], "serving": [], "billed": []})
    c = plot("Replicas", "time (s)", "GPUs", width=420, height=240)
    billed = c.line("t", "billed", source=fleet, line_width=2, color=GREY)
    serving = c.line("t", "serving", source=fleet, line_width=3, color=GREEN)
    c.add_layout(Legend(items=[LegendItem(label="serving", renderers=[serving]),
                               LegendItem(label="billed (loading, serving, draining)", renderers=[billed])],
                        orientation="horizontal", label_text_font_size="10px", padding=2, margin=2, spacing=4),
                 "above")

    numbers, note = readout(width=420), readout(width=860)

    def update() -> None:
        try:
            r = COMPUTE(PARAMS(arrivals=traffic.value, rate_per_s=rate.value, peak_to_mean=peak.value,
                               **sv.TENANT_B[tenant_b.value], tenant_tokens_per_s=limit.value or None,
                               signal=signal.value, weights_from=weights.value, preemption=preempt.value,
                               lose_replica_at_s=lose.value or None, gpu_price_per_hour=price.value))
        except ValueError as exc:          # a combination the sim refuses: say so, keep the plots as they were
            numbers.object = f'<p class="fig-warning">Not computed: {exc}.</p>'
            return
        p = r.params
        mid = r.bin_starts_s + p.bin_s / 2
        series.data = {"t": mid, "offered": r.offered_per_s, "rejected": r.rejected_per_s,
                       "preempted": r.preemptions / p.bin_s, "ttft50": r.binned_ttft_p50_s, "ttft99": r.binned_ttft_p99_s,
                       "tpot50": r.binned_tpot_p50_s, "tpot99": r.binned_tpot_p99_s}
        xs, ys = _steps(r.replica_t_s, r.replicas_ready, p.duration_s)
        cap.data = {"t": xs, "capacity": [y * r.plan.rate_p99_per_s for y in ys]}
        xb, yb = _steps(r.replica_t_s, r.replicas_billed, r.end_s)
        _, ysv = _steps(r.replica_t_s, r.replicas_ready, r.end_s)
        fleet.data = {"t": xb, "serving": ysv, "billed": yb}
        plan = r.plan
        asked = r.requests["A"] + r.requests["B"]
        numbers.object = rows_table([
            ("requests, A / B", f"{r.requests['A']:,} / {r.requests['B']:,}"),
            ("rejected by the token limit", f"{r.rejected['A']:,} / {r.rejected['B']:,}"),
            ("admitted, meeting both limits", " / ".join("-" if v != v else f"{v:.0%}" for v in r.attainment.values())),
            ("P99 TTFT, TPOT (all admitted)", f"{r.ttft_p99_all_s:,.2f} s, {r.tpot_p99_all_s * 1e3:,.0f} ms"),
            ("preemptions (requests hit)", f"{r.preemptions_total:,} ({r.preempted_requests:,})"),
            ("tokens recomputed / swapped", f"{r.recomputed_tokens:,} / {r.swapped_tokens:,}"),
            ("sent again after a replica was lost", f"{r.retried:,}"),
            ("a new replica serves after", f"{r.load_s:,.1f} s"),
            ("GPU-hours, cost", f"{r.gpu_hours:,.3f}, ${r.cost:,.2f}"),
            ("per million output tokens", f"${r.cost_per_m_tokens:,.2f}"),
            (f"{r.static_replicas} replicas all along", f"${r.static_cost_per_m_tokens:,.2f} per million")
            if r.static_replicas else ("replicas all along", "no number of them meets the P99 limits"),
            ("one replica holds the P99 / P50 limits to",
             f"{plan.rate_p99_per_s:,.1f} / {plan.rate_p50_per_s:,.1f} req/s (+{plan.headroom:.0%})"
             if plan.rate_p99_per_s else "misses the P99 limits at every rate simulated"),
        ])
        weights_src = {n: src for n, _, _, src in sv.WEIGHT_SOURCES}[p.weights_from]
        note.object = provenance(
            f"{r.model} in bf16, one {r.gpu} per replica, {p.max_batch} slots, chunked prefill of "
            f"{p.token_budget:,} tokens a step; the scheduler of chapter 04 in every replica. Workload (an "
            f"assumption, not a trace, seed {p.seed}): {asked:,} requests in {p.duration_s:.0f} s; tenant A's prompts "
            f"{p.prompt_tokens // 2:,}-{p.prompt_tokens * 2:,} and answers {p.output_tokens // 2:,}-"
            f"{p.output_tokens * 2:,} tokens (log-uniform), tenant B's {p.b_prompt_tokens // 2:,}-"
            f"{p.b_prompt_tokens * 2:,} and {p.b_output_tokens // 2:,}-{p.b_output_tokens * 2:,} at "
            f"{p.b_rate_per_s:g} requests/s from {p.b_from_s:.0f} to {p.b_to_s:.0f} s. Limits TTFT "
            f"{p.ttft_slo_s:g} s, TPOT {p.tpot_slo_s * 1e3:.0f} ms (assumed, an interactive chat). Autoscaler every "
            f"{p.interval_s:.0f} s between {p.min_replicas} and {p.max_replicas} replicas, Kubernetes HPA's rule "
            f"and 10% tolerance, scale-down window {p.scale_down_window_s:.0f} s; a new replica bills at once and "
            f"serves after its {r.weight_bytes / 1e9:,.1f} GB of weights ({weights_src}) and an assumed "
            f"{p.engine_start_s:.0f} s engine start. Router: fewest requests, its view at most "
            f"{sv.ROUTER_VIEW_S:g} s old. Capacity: one replica under Poisson arrivals of tenant A's mix, "
            f"{sv.CAPACITY_REQUESTS} requests a rate; static plan counts B's requests as A's. "
            f"{r.calibration_note}")

    watch([traffic, rate, peak, tenant_b, limit, signal, weights, preempt, lose, price], update)
    update()
    controls = pn.Column(traffic, rate, peak, tenant_b, limit, signal, weights, preempt, lose, price, width=w + 20)
    layout = pn.Column(
        pn.Row(controls, pn.Column(pn.Row(pn.pane.Bokeh(a), pn.pane.Bokeh(b)), pn.Row(pn.pane.Bokeh(c), numbers))),
        note)
    return FigureView(FIGURE_ID, layout,
                      controls={"traffic": traffic, "rate": rate, "peak": peak, "tenant_b": tenant_b, "limit": limit,
                                "signal": signal, "weights": weights, "preempt": preempt, "lose": lose,
                                "price": price},
                      sources={"series": series, "capacity": cap, "fleet": fleet},
                      readouts={"numbers": numbers, "note": note},
                      plots=[a, b, c])
