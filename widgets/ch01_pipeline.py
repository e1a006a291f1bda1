"""ch01-pipeline: what one forward call computes, stage by stage, and where the weights live.

A stepper walks through one generation step: tokenize -> embed -> the blocks'
attention and MLP (repeated once per layer) -> output head -> sample -> repeat with the
new token. The top plot shows how many weights each stage reads for one new token (log
scale; the current stage is shaded); the bar below shows where the model's stored weights
live, with the part the current stage uses drawn solid. The sampler at the bottom left
applies temperature and top-p to a small logits vector: low temperatures sharpen the
distribution, high ones flatten it, and top-p cuts its tail. The chart at the bottom
right counts how often each token's K, V and Q are used: K and V by every later token,
Q once, which is why a KV cache exists and a Q cache does not.

Controls: the stepper ("step"), model, temperature and top-p. One call:
sim.pipeline.describe_pipeline (its result carries the sampler's and each stage's text).
"""
from __future__ import annotations

import numpy as np
import panel as pn
from bokeh.models import ColumnDataSource, FactorRange, Legend, LegendItem, Range1d

from sim.pipeline import PipelineParams, describe_pipeline
from sim.sampling import SamplingParams
from widgets.base import (BLUE, CONTROL_WIDTH, GREEN, GREY, ORANGE, PURPLE, SKY, VERMILION, YELLOW, FigureView,
                          model_select, plot, provenance, readout, rows_table, stepper, watch)

FIGURE_ID = "ch01-pipeline"
TITLE = "One generation step, stage by stage"
COMPUTE = describe_pipeline
PARAMS = PipelineParams
STATES = {  # named states (widgets.state), as the chapter uses them
    "greedy": {"temperature": 0.0},
    "top-p-half": {"top_p": 0.5},
    "mixtral-mlp": {"model": "mixtral-8x7b", "step": 4}}
STAGES = ["tokenize", "embed", "attention", "mlp", "head", "sample", "repeat"]   # the stepper's steps
STAGE_LABELS = {"tokenize": "tokenize", "embed": "embed", "attention": "attention", "mlp": "MLP",
                "head": "head", "sample": "sample", "repeat": "repeat"}
PART_LABELS = {"embedding": "emb", "attention": "attention", "mlp": "MLP", "norms": "norms", "head": "head"}
PART_COLORS = {"embedding": PURPLE, "attention": GREEN, "mlp": BLUE, "norms": GREY, "head": YELLOW}
Y_FLOOR, Y_CEIL = 1e2, 1e13          # the log axis of the stage plot (weights)
PROMPT_TOKENS = 8                    # tokens in the toy sequence of the K/V/Q chart


def build() -> FigureView:
    step = stepper(len(STAGES), label="Stage", interval_ms=1200, start=1)   # numbered from 1, like the readout
    model = model_select()
    temperature = pn.widgets.FloatSlider(label="Temperature (0 = greedy)", start=0.0, end=2.0, step=0.05, value=1.0,
                                         width=CONTROL_WIDTH)
    top_p = pn.widgets.FloatSlider(label="Top-p (1 = off)", start=0.05, end=1.0, step=0.05, value=1.0,
                                   width=CONTROL_WIDTH)

    stages = ColumnDataSource(data={"stage": [], "weights": [], "color": [], "label": [], "label_y": []})
    cursor = ColumnDataSource(data={"stage": [], "bottom": [], "top": []})
    parts = ColumnDataSource(data={"row": [], "left": [], "right": [], "color": [], "alpha": [], "part": []})
    part_labels = ColumnDataSource(data={"row": [], "x": [], "text": []})
    probs = ColumnDataSource(data={"token": [], "base": [], "final": [], "color": []})
    reuse = ColumnDataSource(data={"x_kv": [], "kv": [], "x_q": [], "q": []})

    x_stages = [STAGE_LABELS[s] for s in STAGES]
    p_stages = plot("Weights each stage reads for one new token", "", "weights read (log scale)",
                    width=600, height=210, x_type="auto", x_range=FactorRange(*x_stages), y_type="log",
                    y_range=Range1d(Y_FLOOR, Y_CEIL))
    p_stages.vbar(x="stage", bottom="bottom", top="top", width=0.95, color=YELLOW, alpha=0.35, source=cursor)
    p_stages.vbar(x="stage", bottom=Y_FLOOR, top="weights", width=0.6, color="color", source=stages)
    p_stages.text(x="stage", y="label_y", text="label", source=stages, text_align="center", y_offset=-3,
                  text_font_size="11px", text_color="#333")
    p_stages.xgrid.grid_line_color = None

    p_parts = plot("Where the stored weights live (solid: the part this stage reads)", "share of stored weights (%)",
                   "", width=600, height=120, x_range=Range1d(0, 100), y_type="auto", y_range=FactorRange("model"))
    p_parts.hbar(y="row", left="left", right="right", height=0.7, color="color", fill_alpha="alpha",
                 line_color="white", source=parts)
    p_parts.text(x="x", y="row", text="text", source=part_labels, text_align="center", text_baseline="middle",
                 text_font_size="10px", text_color="#111")

    p_sample = plot("Sampling: next-token probabilities", "", "probability", width=340, height=260,
                    x_type="auto", x_range=FactorRange(*SamplingParams().labels), y_range=Range1d(0, 1.05))
    base_bars = p_sample.vbar(x="token", top="base", width=0.8, fill_color=None, line_color=GREY, line_width=1.5,
                              source=probs)
    final_bars = p_sample.vbar(x="token", top="final", width=0.5, color="color", source=probs)
    p_sample.xaxis.major_label_orientation = 0.8
    p_sample.xgrid.grid_line_color = None
    p_sample.add_layout(Legend(items=[LegendItem(label="temperature 1, no cut", renderers=[base_bars]),
                                      LegendItem(label="after temperature, top-p", renderers=[final_bars])],
                               location="top_right", label_text_font_size="10px", background_fill_alpha=0.8),
                        "center")

    p_reuse = plot("Uses of each token's K, V and Q", "token position", "times used", width=250, height=260,
                   x_range=Range1d(0.4, PROMPT_TOKENS + 0.6))
    kv_bars = p_reuse.vbar(x="x_kv", top="kv", width=0.38, color=ORANGE, source=reuse)
    q_bars = p_reuse.vbar(x="x_q", top="q", width=0.38, color=SKY, source=reuse)
    p_reuse.y_range.start = 0
    p_reuse.xgrid.grid_line_color = None
    p_reuse.add_layout(Legend(items=[LegendItem(label="K and V", renderers=[kv_bars]),
                                     LegendItem(label="Q", renderers=[q_bars])],
                              location="top_right", label_text_font_size="10px", background_fill_alpha=0.8),
                       "center")

    for p in (p_stages, p_parts, p_sample, p_reuse):
        p.toolbar_location = None                 # nothing to zoom: keep the titles clear
    stage_text, sample_numbers, note = readout(), readout(), readout(width=840)

    def update() -> None:
        r = describe_pipeline(PipelineParams(model=model.value, tokens=PROMPT_TOKENS, sampling=SamplingParams(
            temperature=temperature.value, top_p=top_p.value)))
        here = STAGES[step.value - 1]
        labels = [*r.stage_weights_text, "none"]               # "repeat" reads nothing by itself
        reads = [*r.stage_weights_read, 0.0]
        stages.data = {
            "stage": x_stages, "weights": [w if w > 0 else Y_FLOOR for w in reads],   # no bar where none
            "color": [ORANGE if s == here else SKY for s in STAGES], "label": labels,
            "label_y": [w if w > 0 else Y_FLOOR * 3 for w in reads]}
        cursor.data = {"stage": [STAGE_LABELS[here]], "bottom": [Y_FLOOR], "top": [Y_CEIL]}
        used = r.stage_part[r.stages.index(here)] if here in r.stages else ""
        share = r.part_share * 100
        right = np.cumsum(share)
        left = right - share
        parts.data = {"row": ["model"] * len(r.parts), "left": left, "right": right,
                      "color": [PART_COLORS[p] for p in r.parts],
                      "alpha": [1.0 if p == used else 0.3 for p in r.parts], "part": r.parts}
        big = share >= 5
        part_labels.data = {"row": ["model"] * int(big.sum()), "x": ((left + right) / 2)[big],
                            "text": [f"{PART_LABELS[p]} {s:.0f}%" if s >= 10 else PART_LABELS[p]
                                     for p, s, b in zip(r.parts, share, big) if b]}
        i = r.stages.index(here) if here in r.stages else None
        flops = f"{r.stage_flops[i] / 1e9:,.2f} GFLOP" if i is not None and r.stage_flops[i] > 0 else "none"
        stage_text.object = (f"<p><b>{STAGES.index(here) + 1}. {STAGE_LABELS[here]}</b>: {r.stage_notes[here]}</p>"
                             + rows_table([("weights read", labels[STAGES.index(here)]), ("FLOPs", flops)]))
        reuse.data = {"x_kv": np.arange(1, PROMPT_TOKENS + 1) - 0.2, "kv": r.kv_reads_per_token,
                      "x_q": np.arange(1, PROMPT_TOKENS + 1) + 0.2, "q": r.q_reads_per_token}
        note.object = provenance(r.note)
        s = r.sampling
        probs.data = {"token": s.labels, "base": s.probs_base, "final": s.probs_final,
                      "color": [VERMILION if k else GREY for k in s.kept]}
        top = int(np.argmax(s.probs_final))
        sample_numbers.object = rows_table([
            ("tokens kept", f"{s.kept_count} of {len(s.labels)}"),
            (f"p({s.labels[top]})", f"{s.probs_base[top]:.2f} at T=1, now {s.probs_final[top]:.2f}"),
            ("entropy", f"{abs(s.entropy_bits_base):.2f} bits at T=1, now {abs(s.entropy_bits_final):.2f}"),
        ])

    watch([step, model, temperature, top_p], update)
    update()
    layout = pn.Column(
        pn.Row(pn.Column(step, model, stage_text, temperature, top_p, sample_numbers, width=CONTROL_WIDTH + 20),
               pn.Column(pn.pane.Bokeh(p_stages), pn.pane.Bokeh(p_parts),
                         pn.Row(pn.pane.Bokeh(p_sample), pn.pane.Bokeh(p_reuse)))),
        note)
    return FigureView(FIGURE_ID, layout,
                      controls={"step": step, "model": model, "temperature": temperature, "top_p": top_p},
                      sources={"stages": stages, "cursor": cursor, "parts": parts, "part_labels": part_labels,
                               "probs": probs, "reuse": reuse},
                      readouts={"stage": stage_text, "sampling": sample_numbers, "note": note},
                      plots=[p_stages, p_parts, p_sample, p_reuse])
