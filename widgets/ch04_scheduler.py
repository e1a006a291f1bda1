"""ch04-scheduler: static batching against continuous (iteration-level) batching.

The same request mix runs through two schedulers. Static batching waits until its slots are
full or the oldest waiting request has waited the batch timeout, runs the whole batch
until its longest request ends (finished requests keep their slot as padding) and makes
new arrivals wait for the next batch. Continuous batching decides
before every step who runs: finished requests leave and waiting ones join at once
(Orca, R7). Each timeline is slots (rows) against time; a bar spans the steps in which a
slot did one thing for one request, coloured by what it did (hover: the request and steps).

A request with a very long prompt shows the cost of prefilling it in one step: every
running decode stalls for as long as that prefill takes. Chunked prefill gives each step
a token budget (decodes first, then prompt chunks), so the long prompt is spread over
several steps and the stall shrinks to one chunk.

Controls: GPU, model, slots (batch size), the static batcher's timeout, the long-prompt
button (a toggle), chunked prefill on/off and its token budget. One call: sim.scheduler.compare_schedules.
Readouts: per-request TTFT (plot), mean and worst TTFT, slot utilisation, longest decode
stall, time to finish the mix, padding tokens.
"""
from __future__ import annotations

import numpy as np
import panel as pn
from bokeh.models import ColumnDataSource, FactorRange, HoverTool, Legend, LegendItem, Range1d

from sim import models
from sim.scheduler import SLOT_KINDS, RequestMixParams, SchedulerParams, compare_schedules
from widgets.base import (BLUE, CONTROL_WIDTH, GREY, ORANGE, PURPLE, VERMILION, FigureView, details_table, gpu_select,
                          inset_legend, legend_glyph, model_select, plot, provenance, readout, watch)

FIGURE_ID = "ch04-scheduler"
TITLE = "Static and continuous batching of the same requests"
COMPUTE = compare_schedules
PARAMS = SchedulerParams
STATES = {  # named states (widgets.state), as the chapter uses them
    "long-prompt": {"long_prompt": True},
    "chunked-prefill": {"long_prompt": True, "chunked": True}}
MODELS = ("llama-3.1-8b", "llama-2-7b", "gemma-7b", "llama-3.2-1b")   # fit on every GPU in the list
BUDGETS = (128, 256, 512, 1024, 2048, 4096)
TIMEOUTS_MS = (0, 25, 50, 100, 200)
POLICIES = ("static", "continuous")
KIND_COLOURS = {"idle": "#ececec", "prefill": ORANGE, "decode": BLUE, "padding": PURPLE, "stalled": VERMILION}
KIND_LABELS = {"prefill": "prefill", "decode": "decode", "stalled": "stalled (holds a slot)",
               "padding": "padding (finished, still computed)", "idle": "idle"}
TIMELINE_HEIGHT = 170
PLOT_WIDTH = 600


def _numbers_html(rows: list[tuple[str, str, str]]) -> str:
    head = "<tr><th></th><th>static</th><th>continuous</th></tr>"
    body = "".join(f"<tr><th>{k}</th><td>{a}</td><td>{b}</td></tr>" for k, a, b in rows)
    return f'<table class="fig-numbers">{head}{body}</table>'


def _runs(r) -> tuple:
    """The timeline as runs: consecutive steps, back to back, in which a slot did the same
    thing for the same request, one quad each (the same picture as a quad per step and
    slot, with a fraction of the quads to send and draw). Arrays (slot, first step, last
    step, kind code, request index) in slot order, then time."""
    kinds, reqs = r.slot_kind.T, r.slot_request.T       # (slots, steps)
    new = np.ones(kinds.shape, dtype=bool)
    new[:, 1:] = ((kinds[:, 1:] != kinds[:, :-1]) | (reqs[:, 1:] != reqs[:, :-1])
                  | (r.step_start_s[1:] != r.step_end_s[:-1]))        # a gap: the GPU was idle between them
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], new.size) - 1                        # every slot's first step starts a run
    steps = kinds.shape[1]
    return starts // steps, starts % steps, ends % steps, kinds.ravel()[starts], reqs.ravel()[starts]


def build() -> FigureView:
    defaults = SchedulerParams()
    mix = RequestMixParams()
    gpu = gpu_select(defaults.gpu)
    model = model_select(defaults.model, names=list(MODELS))
    slots = pn.widgets.IntSlider(label="Slots (requests running at once)", start=2, end=16,
                                 value=defaults.max_batch, width=CONTROL_WIDTH)
    timeout = pn.widgets.Select(label="Static: wait for a full batch at most",
                                options={f"{t} ms": t / 1e3 for t in TIMEOUTS_MS},
                                value=defaults.batch_timeout_s, width=CONTROL_WIDTH)
    long_prompt = pn.widgets.Toggle(
        label=(f"Add a long prompt ({defaults.long_prompt_tokens:,} tokens) "
               f"at {defaults.long_prompt_arrival_s * 1e3:.0f} ms"),
        value=False, color="warning", width=CONTROL_WIDTH,
        # dark text on the warning colour: white on it reads at 2:1, under WCAG's 4.5:1
        stylesheets=[".bk-btn-warning, .bk-btn-warning.bk-active { color: #1d2330; }"])
    chunked = pn.widgets.Checkbox(label="Chunked prefill (continuous only)", value=defaults.chunked_prefill,
                                  width=CONTROL_WIDTH)
    budget = pn.widgets.RadioButtonGroup(options={(f"{b // 1024}K" if b >= 1024 else str(b)): b for b in BUDGETS},
                                         value=defaults.token_budget, width=CONTROL_WIDTH)
    budget_label = pn.pane.HTML("Chunked prefill: tokens per step (1K = 1,024)", width=CONTROL_WIDTH,
                                margin=(6, 10, 0, 10))

    sources = {f"{pol}_{kind}": ColumnDataSource(data={"left": [], "right": [], "bottom": [], "top": [],
                                                       "request": [], "steps": []})
               for pol in POLICIES for kind in SLOT_KINDS}
    arrivals = ColumnDataSource(data={"t_ms": [], "y": [], "request": []})
    ttft = ColumnDataSource(data={"request": [], "static_ms": [], "continuous_ms": []})

    x_range = Range1d(0, 1)
    timelines = {}
    for pol in POLICIES:
        first = pol == POLICIES[0]                     # the upper timeline carries the legend
        p = plot(pol, "time since the first request arrived (ms)", "slot", width=PLOT_WIDTH,
                 height=TIMELINE_HEIGHT + (34 if first else 0), x_range=x_range,
                 y_range=Range1d(-1.5, defaults.max_batch - 0.5))
        p.ygrid.grid_line_color = None
        renderers = {kind: p.quad(left="left", right="right", bottom="bottom", top="top",
                                  source=sources[f"{pol}_{kind}"], fill_color=KIND_COLOURS[kind], line_color=None)
                     for kind in SLOT_KINDS}
        arrived = p.scatter("t_ms", "y", source=arrivals, marker="triangle", size=7, color="#444")
        if first:
            items = [LegendItem(label=KIND_LABELS[k], renderers=[legend_glyph(p, "quad", fill_color=KIND_COLOURS[k],
                                                                             line_color=None)])
                     for k in ("prefill", "decode", "stalled", "padding", "idle")]
            p.add_layout(Legend(items=[*items, LegendItem(label="arrival", renderers=[arrived])],
                                orientation="horizontal", label_text_font_size="11px", padding=2, margin=2,
                                spacing=6, glyph_width=14), "above")
        p.add_tools(HoverTool(renderers=list(renderers.values()),
                              tooltips=[("request", "@request"), ("steps", "@steps"), ("from", "@left{0.0} ms"),
                                        ("to", "@right{0.0} ms")]))
        timelines[pol] = p

    p_ttft = plot("Time to first token of each request", "request (in arrival order)",
                  "TTFT (ms, log scale)", width=PLOT_WIDTH, height=210, x_range=FactorRange(factors=[]), x_type="auto",
                  y_type="log")
    p_ttft.y_range.range_padding = 0.3
    r_static = p_ttft.scatter("request", "static_ms", source=ttft, marker="square", size=9, color=GREY)
    r_cont = p_ttft.scatter("request", "continuous_ms", source=ttft, size=9, color=BLUE)
    inset_legend(p_ttft, [("static", r_static), ("continuous", r_cont)], "top_left")
    p_ttft.xaxis.major_label_text_font_size = "10px"

    numbers, requests_note, note = readout(width=CONTROL_WIDTH), readout(width=860), readout(width=860)

    def update() -> None:
        c = compare_schedules(SchedulerParams(model=model.value, gpu=gpu.value, max_batch=slots.value,
                                              batch_timeout_s=timeout.value,
                                              add_long_prompt=long_prompt.value, chunked_prefill=chunked.value,
                                              token_budget=budget.value))
        results = {"static": c.static, "continuous": c.continuous}
        for pol, r in results.items():
            names = np.array(r.requests + [""])            # slot_request == -1 (empty) -> ""
            slot, first, last, code, req = _runs(r)
            for kind_code, kind in enumerate(r.slot_kind_names):
                i = code == kind_code
                sources[f"{pol}_{kind}"].data = {
                    "left": r.step_start_s[first[i]] * 1e3, "right": r.step_end_s[last[i]] * 1e3,
                    "bottom": slot[i] - 0.42, "top": slot[i] + 0.42, "request": names[req[i]].tolist(),
                    "steps": [f"{a}" if a == b else f"{a}-{b}" for a, b in zip(first[i].tolist(), last[i].tolist())]}
            timelines[pol].y_range.end = slots.value - 0.5
        s, k = c.static, c.continuous
        arrivals.data = {"t_ms": k.arrival_s * 1e3, "y": [-1.0] * len(k.requests), "request": k.requests}
        ttft.data = {"request": k.requests, "static_ms": s.ttft_s * 1e3, "continuous_ms": k.ttft_s * 1e3}
        p_ttft.x_range.factors = list(k.requests)
        x_range.end = max(s.finish_s.max(), k.finish_s.max()) * 1e3
        timelines["static"].title.text = (f"Static: waits for {slots.value} requests or {timeout.value * 1e3:.0f} ms, "
                                          "runs until the longest ends")
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
        at = lambda v: f"{v * 1e3:,.1f}"    # noqa: E731 (formatting only)
        requests_note.object = details_table(
            "Each request's times under both policies (ms since the first arrival)",
            ("request", "prompt, output tokens", "arrives", "static: admitted", "first token", "done",
             "continuous: admitted", "first token", "done"),
            [(name, f"{k.prompt_tokens[i]:,}, {k.output_tokens[i]:,}", at(k.arrival_s[i]),
              at(s.admitted_s[i]), at(s.first_token_s[i]), at(s.finish_s[i]),
              at(k.admitted_s[i]), at(k.first_token_s[i]), at(k.finish_s[i])) for i, name in enumerate(k.requests)])
        note.object = provenance(
            f"{models.get(model.value).display_name}, bf16, on one GPU; KV cache room {k.kv_capacity_tokens:,} tokens. "
            f"Workload: {len(k.requests)} requests (seed {mix.seed}), Poisson arrivals every "
            f"{mix.mean_interarrival_s * 1e3:.0f} ms on average, prompts {mix.prompt_tokens_min:,}-"
            f"{mix.prompt_tokens_max:,} tokens, outputs {mix.output_tokens_min}-{mix.output_tokens_max} tokens "
            f"(log-uniform). Utilisation = share of slot-time spent on prefill or decode "
            f"while the GPU is busy. {k.calibration_note}")

    watch([gpu, model, slots, timeout, long_prompt, chunked, budget], update)
    update()
    layout = pn.Column(
        pn.Row(pn.Column(gpu, model, slots, timeout, long_prompt, chunked, budget_label, budget, numbers,
                         width=CONTROL_WIDTH + 20),
               pn.Column(pn.pane.Bokeh(timelines["static"]), pn.pane.Bokeh(timelines["continuous"]),
                         pn.pane.Bokeh(p_ttft))),
        requests_note, note)
    return FigureView(FIGURE_ID, layout,
                      controls={"gpu": gpu, "model": model, "slots": slots, "timeout": timeout,
                                "long_prompt": long_prompt,
                                "chunked": chunked, "budget": budget},
                      sources={**sources, "arrivals": arrivals, "ttft": ttft},
                      readouts={"numbers": numbers, "requests_note": requests_note, "note": note},
                      plots=[timelines["static"], timelines["continuous"], p_ttft])
