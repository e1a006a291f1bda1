"""ch04-scheduler: static batching against continuous (iteration-level) batching.

The same request mix runs through two schedulers. Static batching fills its slots, runs
the whole batch until its longest request ends (finished requests keep their slot as
padding) and makes new arrivals wait for the next batch. Continuous batching decides
before every step who runs: finished requests leave and waiting ones join at once
(Orca, R7). Each timeline is slots (rows) against time; every cell is one step of one
slot, coloured by what the slot did in that step.

A request with a very long prompt shows the cost of prefilling it in one step: every
running decode stalls for as long as that prefill takes. Chunked prefill gives each step
a token budget (decodes first, then prompt chunks), so the long prompt is spread over
several steps and the stall shrinks to one chunk.

Controls: GPU, model, slots (batch size), the long-prompt button (a toggle), chunked
prefill on/off and its token budget. One call: sim.scheduler.compare_schedules.
Readouts: per-request TTFT (plot), mean and worst TTFT, slot utilisation, longest decode
stall, time to finish the mix, padding tokens.
"""
from __future__ import annotations

import numpy as np
import panel as pn
from bokeh.models import ColumnDataSource, FactorRange, HoverTool, Range1d

from sim import calibration, hardware, models
from sim.scheduler import SLOT_KINDS, RequestMixParams, SchedulerParams, compare_schedules
from widgets.base import (BLUE, CONTROL_WIDTH, GREY, ORANGE, PURPLE, VERMILION, FigureView, plot, provenance,
                          readout, watch)

FIGURE_ID = "ch04-scheduler"
TITLE = "Static and continuous batching of the same requests"
MODELS = ("llama-3.1-8b", "llama-2-7b", "gemma-7b", "llama-3.2-1b")   # fit on every GPU in the list
BUDGETS = (128, 256, 512, 1024, 2048, 4096)
POLICIES = ("static", "continuous")
KIND_COLOURS = {"idle": "#ececec", "prefill": ORANGE, "decode": BLUE, "padding": PURPLE, "stalled": VERMILION}
KIND_MEANING = {"prefill": "prompt tokens", "decode": "one new token", "stalled": "waits (holds its slot)",
                "padding": "finished, still computed", "idle": "empty"}
TIMELINE_HEIGHT = 170
PLOT_WIDTH = 600


def _legend_html() -> str:
    cells = "".join(
        f'<span style="display:inline-block;margin-right:14px;white-space:nowrap">'
        f'<span style="display:inline-block;width:12px;height:12px;background:{KIND_COLOURS[k]};'
        f'border:1px solid #bbb;vertical-align:-2px;margin-right:4px"></span><b>{k}</b> '
        f'<span style="color:#666">{KIND_MEANING[k]}</span></span>'
        for k in ("prefill", "decode", "stalled", "padding", "idle"))
    return f'<div class="fig-legend" style="font-size:12px">{cells}</div>'


def _numbers_html(rows: list[tuple[str, str, str]]) -> str:
    head = "<tr><th></th><th>static</th><th>continuous</th></tr>"
    body = "".join(f"<tr><th>{k}</th><td>{a}</td><td>{b}</td></tr>" for k, a, b in rows)
    return f'<table class="fig-numbers">{head}{body}</table>'


def build() -> FigureView:
    defaults = SchedulerParams()
    mix = RequestMixParams()
    gpu = pn.widgets.Select(label="GPU", options=hardware.names(), value=defaults.gpu, width=CONTROL_WIDTH)
    model = pn.widgets.Select(label="Model", options={models.get(m).display_name: m for m in MODELS},
                              value=defaults.model, width=CONTROL_WIDTH)
    slots = pn.widgets.IntSlider(label="Slots (requests running at once)", start=2, end=16,
                                 value=defaults.max_batch, width=CONTROL_WIDTH)
    long_prompt = pn.widgets.Toggle(
        label=(f"Add a long prompt ({defaults.long_prompt_tokens:,} tokens) "
               f"at {defaults.long_prompt_arrival_s * 1e3:.0f} ms"),
        value=False, color="warning", width=CONTROL_WIDTH)
    chunked = pn.widgets.Checkbox(label="Chunked prefill (continuous only)", value=defaults.chunked_prefill,
                                  width=CONTROL_WIDTH)
    budget = pn.widgets.RadioButtonGroup(options={(f"{b // 1024}K" if b >= 1024 else str(b)): b for b in BUDGETS},
                                         value=defaults.token_budget, width=CONTROL_WIDTH)
    budget_label = pn.pane.HTML("Chunked prefill: tokens per step (1K = 1,024)", width=CONTROL_WIDTH,
                                margin=(6, 10, 0, 10))

    sources = {f"{pol}_{kind}": ColumnDataSource(data={"left": [], "right": [], "bottom": [], "top": [],
                                                       "request": [], "step": []})
               for pol in POLICIES for kind in SLOT_KINDS}
    arrivals = ColumnDataSource(data={"t_ms": [], "y": [], "request": []})
    ttft = ColumnDataSource(data={"request": [], "static_ms": [], "continuous_ms": []})

    x_range = Range1d(0, 1)
    timelines = {}
    for pol in POLICIES:
        p = plot(pol, "time since the first request arrived (ms)", "slot", width=PLOT_WIDTH, height=TIMELINE_HEIGHT,
                 x_range=x_range, y_range=Range1d(-1.5, defaults.max_batch - 0.5))
        p.ygrid.grid_line_color = None
        renderers = []
        for kind in SLOT_KINDS:
            renderers.append(p.quad(left="left", right="right", bottom="bottom", top="top",
                                    source=sources[f"{pol}_{kind}"], fill_color=KIND_COLOURS[kind],
                                    line_color=None))
        p.scatter("t_ms", "y", source=arrivals, marker="triangle", size=7, color="#444")
        p.add_tools(HoverTool(renderers=renderers, tooltips=[("request", "@request"), ("step", "@step"),
                                                             ("from", "@left{0.0} ms"), ("to", "@right{0.0} ms")]))
        timelines[pol] = p

    p_ttft = plot("Time to first token: static (grey squares), continuous (blue dots)", "request (in arrival order)",
                  "TTFT (ms, log scale)", width=PLOT_WIDTH, height=210, x_range=FactorRange(factors=[]), x_type="auto",
                  y_type="log")
    p_ttft.y_range.range_padding = 0.3
    p_ttft.scatter("request", "static_ms", source=ttft, marker="square", size=9, color=GREY)
    p_ttft.scatter("request", "continuous_ms", source=ttft, size=9, color=BLUE)
    p_ttft.xaxis.major_label_text_font_size = "10px"

    legend = readout(_legend_html(), width=PLOT_WIDTH)
    numbers, note = readout(width=CONTROL_WIDTH), readout(width=860)

    def update() -> None:
        c = compare_schedules(SchedulerParams(model=model.value, gpu=gpu.value, max_batch=slots.value,
                                              add_long_prompt=long_prompt.value, chunked_prefill=chunked.value,
                                              token_budget=budget.value))
        results = {"static": c.static, "continuous": c.continuous}
        for pol, r in results.items():
            kinds = r.slot_kind
            names = np.array(r.requests + [""])            # slot_request == -1 (empty) -> ""
            for code, kind in enumerate(r.slot_kind_names):
                step, slot = np.nonzero(kinds == code)
                sources[f"{pol}_{kind}"].data = {
                    "left": r.step_start_s[step] * 1e3, "right": r.step_end_s[step] * 1e3,
                    "bottom": slot - 0.42, "top": slot + 0.42,
                    "request": names[r.slot_request[step, slot]].tolist(), "step": step}
            timelines[pol].y_range.end = slots.value - 0.5
        s, k = c.static, c.continuous
        arrivals.data = {"t_ms": k.arrival_s * 1e3, "y": [-1.0] * len(k.requests), "request": k.requests}
        ttft.data = {"request": k.requests, "static_ms": s.ttft_s * 1e3, "continuous_ms": k.ttft_s * 1e3}
        p_ttft.x_range.factors = list(k.requests)
        x_range.end = max(s.finish_s.max(), k.finish_s.max()) * 1e3
        timelines["static"].title.text = "Static: each batch runs until its longest request ends"
        timelines["continuous"].title.text = "Continuous: " + (
            f"chunked prefill, at most {budget.value:,} tokens a step" if k.chunked_prefill
            else "each prompt prefilled whole in one step")
        ms = lambda v: f"{v * 1e3:,.0f} ms"   # noqa: E731 (formatting only)
        numbers.object = _numbers_html([
            ("mean TTFT", ms(np.mean(s.ttft_s)), ms(np.mean(k.ttft_s))),
            ("worst TTFT", ms(s.ttft_s.max()), ms(k.ttft_s.max())),
            ("longest stall", ms(s.longest_decode_stall_s), ms(k.longest_decode_stall_s)),
            ("slot utilisation", f"{s.slot_utilisation:.0%}", f"{k.slot_utilisation:.0%}"),
            ("all done at", f"{s.makespan_s:.2f} s", f"{k.makespan_s:.2f} s"),
            ("output tokens/s", f"{s.throughput_tokens_per_s:,.0f}", f"{k.throughput_tokens_per_s:,.0f}"),
            ("padding tokens", f"{s.padding_tokens:,}", f"{k.padding_tokens:,}"),
        ])
        cal = calibration.for_gpu(hardware.get(gpu.value))
        note.object = provenance(
            f"{models.get(model.value).display_name}, bf16, on one GPU; KV cache room {k.kv_capacity_tokens:,} tokens. "
            f"Workload: {len(k.requests)} requests (seed {mix.seed}), Poisson arrivals every "
            f"{mix.mean_interarrival_s * 1e3:.0f} ms on average, prompts {mix.prompt_tokens_min:,}-"
            f"{mix.prompt_tokens_max:,} tokens, outputs {mix.output_tokens_min}-{mix.output_tokens_max} tokens "
            f"(log-uniform). Triangles mark arrivals. Utilisation = share of slot-time spent on prefill or decode "
            f"while the GPU is busy. {cal.note}")

    watch([gpu, model, slots, long_prompt, chunked, budget], update)
    update()
    layout = pn.Column(
        pn.Row(pn.Column(gpu, model, slots, long_prompt, chunked, budget_label, budget, numbers,
                         width=CONTROL_WIDTH + 20),
               pn.Column(legend, pn.pane.Bokeh(timelines["static"]), pn.pane.Bokeh(timelines["continuous"]),
                         pn.pane.Bokeh(p_ttft))),
        note)
    return FigureView(FIGURE_ID, layout,
                      controls={"gpu": gpu, "model": model, "slots": slots, "long_prompt": long_prompt,
                                "chunked": chunked, "budget": budget},
                      sources={**sources, "arrivals": arrivals, "ttft": ttft},
                      readouts={"legend": legend, "numbers": numbers, "note": note},
                      plots=[timelines["static"], timelines["continuous"], p_ttft])
