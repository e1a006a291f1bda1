"""ch09-speculative-speedup: what speculation buys each user as the batch grows.

A round costs k draft steps plus one target pass over k + 1 tokens per sequence, and
yields (1 - alpha^(k+1)) / (1 - alpha) tokens on average; plain decoding yields one token
per step. While the step is memory-bound the verify pass costs about one plain step and
the speedup nears the expected yield; once the batch makes the step compute-bound the
verify pass costs up to k + 1 plain steps and the speedup falls, below 1 where
speculation costs more than it saves. The dashed line is where the target's and the
drafter's KV caches fill the memory; the triangles are measured EAGLE 3.1 gains on
another model and GPU, for scale.

Controls: GPU, target model, drafter (each with its stated draft cost and acceptance),
acceptance alpha (set to the drafter's when the drafter changes), drafted tokens k, and
the context each sequence holds. One call per update: sim.speculative.speedup_vs_batch.
"""
from __future__ import annotations

import math

import numpy as np
import panel as pn
from bokeh.models import ColumnDataSource, Range1d, Span

from sim import models
from sim.speculative import DRAFTERS, SpeedupParams, drafter_acceptance, speedup_vs_batch
from widgets.base import (BLUE, CONTROL_WIDTH, GREEN, GREY, ORANGE, VERMILION, FigureView, fmt_gib, fmt_ms,
                          gpu_select, inset_legend, legend_glyph, model_select, plot, provenance, readout,
                          rows_table, watch)

FIGURE_ID = "ch09-speculative-speedup"
TITLE = "Speculative decoding's per-user speedup against batch size"
COMPUTE = speedup_vs_batch
PARAMS = SpeedupParams
STATES = {"h200-70b": {"gpu": "H200", "model": "llama-3.1-70b"}, "ngram": {"drafter": "ngram"}}   # named states (widgets.state)
DEFAULT = PARAMS()
SMALL_DRAFTER = "llama-3.2-1b"
CONTEXTS = {"256 tokens": 256, "1,024 tokens": 1024, "4,096 tokens": 4096, "16,384 tokens": 16384}


def build() -> FigureView:
    gpu = gpu_select(DEFAULT.gpu)
    model = model_select(DEFAULT.model, label="Target model")
    drafter = pn.widgets.Select(label="Drafter", options={**{d.label: key for key, d in DRAFTERS.items()},
                                                          f"small model: {models.get(SMALL_DRAFTER).display_name}":
                                                          SMALL_DRAFTER},
                                value=DEFAULT.drafter, width=CONTROL_WIDTH)
    alpha = pn.widgets.FloatSlider(label="Acceptance per token (alpha)", start=0.0, end=1.0, step=0.05,
                                   value=drafter_acceptance(DEFAULT.drafter), width=CONTROL_WIDTH)
    k = pn.widgets.IntSlider(label="Drafted tokens per round (k)", start=1, end=8, value=DEFAULT.k,
                             width=CONTROL_WIDTH)
    context = pn.widgets.Select(label="Context per sequence", options=CONTEXTS, value=DEFAULT.context_tokens,
                                width=CONTROL_WIDTH)

    curve = ColumnDataSource(data={"batch": [], "speedup": [], "base_ms": [], "verify_ms": [], "draft_ms": []})
    reference = ColumnDataSource(data={"batch": [], "measured": [], "modelled": []})
    capacity = Span(location=1, dimension="height", line_dash="dashed", line_color=VERMILION, line_width=1.5)
    ceiling = Span(location=1, dimension="width", line_dash="dotted", line_color=BLUE, line_width=1.5)

    p_speed = plot("Per-user speedup over plain decoding", "sequences in the batch (log)", "speedup",
                   x_type="log", width=310, height=320, y_range=Range1d(0, 3))
    line = p_speed.line("batch", "speedup", source=curve, line_width=2.5, color=BLUE)
    measured = p_speed.scatter("batch", "measured", source=reference, size=10, color=ORANGE, marker="triangle")
    p_speed.scatter("batch", "modelled", source=reference, size=7, color=BLUE)
    p_speed.add_layout(Span(location=1.0, dimension="width", line_color="#333", line_width=1))
    for s in (capacity, ceiling):
        p_speed.add_layout(s)
    inset_legend(p_speed, [("modelled", line), ("EAGLE 3.1, measured", measured),
                           ("expected tokens per round", legend_glyph(p_speed, "line", line_color=BLUE,
                                                                      line_dash="dotted")),
                           ("KV caches full", legend_glyph(p_speed, "line", line_color=VERMILION, line_dash="dashed"))],
                 location="bottom_left")

    p_time = plot("What a round costs", "sequences in the batch (log)", "ms (log)", x_type="log", y_type="log",
                  width=260, height=320)
    base = p_time.line("batch", "base_ms", source=curve, line_width=2, color=GREY)
    verify = p_time.line("batch", "verify_ms", source=curve, line_width=2, color=GREEN)
    draft = p_time.line("batch", "draft_ms", source=curve, line_width=2, color=ORANGE)
    inset_legend(p_time, [("plain step (1 token)", base), ("verify (k + 1 tokens)", verify),
                          ("k draft steps", draft)], location="top_left")
    numbers, note = readout(), readout(width=840)

    def update() -> None:
        r = speedup_vs_batch(SpeedupParams(model=model.value, gpu=gpu.value, drafter=drafter.value, alpha=alpha.value,
                                           k=k.value, context_tokens=context.value))
        curve.data = {"batch": r.batch_grid, "speedup": r.speedup, "base_ms": r.baseline_step_time_s * 1e3,
                      "verify_ms": r.verify_time_s * 1e3,
                      "draft_ms": np.where(r.draft_time_s > 0, r.draft_time_s * 1e3, np.nan)}   # log axis: no zeros
        reference.data = {"batch": r.reference_batches, "measured": r.reference_speedups,
                          "modelled": r.speedup_at_reference}
        capacity.location = max(r.kv_capacity_batch, 1)
        capacity.visible = 1 <= r.kv_capacity_batch <= r.batch_grid[-1]
        ceiling.location = r.expected_tokens_per_round
        p_speed.y_range.end = 1.1 * max(r.expected_tokens_per_round, r.speedup.max(), r.reference_speedups.max())
        fits = r.kv_capacity_batch >= 1
        numbers.object = rows_table([
            ("expected tokens per round", f"{r.expected_tokens_per_round:.2f}"),
            ("speedup, 1 sequence", f"{r.speedup[0]:.2f}\u00d7"),
            ("speedup, 16 sequences", f"{r.speedup_at_reference[-1]:.2f}\u00d7"),
            ("KV caches fit", f"{r.kv_capacity_batch:,} sequences" if fits else "none"),
            ("speedup there", f"{r.speedup_at_kv_capacity:.2f}\u00d7" if fits else "-"),
            ("first below 1 at", f"never, up to {r.batch_grid[-1]:,}" if math.isnan(r.break_even_batch)
             else f"{r.break_even_batch:,.0f} sequence{'s' if r.break_even_batch > 1 else ''}"),
            ("round at 1 sequence", f"{fmt_ms(r.draft_time_s[0], 2)} draft + {fmt_ms(r.verify_time_s[0], 2)} verify"),
            ("drafter's weights", fmt_gib(r.drafter_weight_bytes, 2)),
        ])
        note.object = provenance(
            f"Target {models.get(model.value).display_name}, bf16, CUDA graphs, every sequence speculating with the "
            f"same k. {r.drafter_note}. Triangles: {r.reference_setup} (per-user output throughput at 1, 4 and 16 "
            f"requests in flight), not this model or GPU. The KV line counts target and drafter caches of "
            f"context + k tokens in vLLM's default memory share. {r.calibration_note}")

    def drafter_changed() -> None:
        typical = drafter_acceptance(drafter.value)
        if alpha.value != typical:
            alpha.value = typical          # updates through alpha's watcher
        else:
            update()

    watch([gpu, model, alpha, k, context], update)
    watch([drafter], drafter_changed)
    update()
    layout = pn.Column(
        pn.Row(pn.Column(gpu, model, drafter, alpha, k, context, numbers, width=CONTROL_WIDTH + 20),
               pn.pane.Bokeh(p_speed), pn.pane.Bokeh(p_time)),
        note)
    return FigureView(FIGURE_ID, layout, controls={"gpu": gpu, "model": model, "drafter": drafter, "alpha": alpha,
                                                        "k": k, "context": context},
                      sources={"curve": curve, "reference": reference},
                      readouts={"numbers": numbers, "note": note}, plots=[p_speed, p_time])
