"""ch09-speculative-rounds: how many tokens one round of speculation yields.

Each round the drafter proposes k tokens and the target checks them left to right: the
drafts up to the first rejection are kept, the rest are thrown away unchecked, and the
target adds one token of its own (its correction at the rejected position, or a bonus
token when every draft survived). With a per-token acceptance alpha the expected yield is
(1 - alpha^(k+1)) / (1 - alpha), which grows with k but never past 1 / (1 - alpha).

Controls: acceptance alpha, drafted tokens k, the random seed, and a stepper over the
rounds (rounds it has not reached are drawn faint). One call per update: sim.speculative.simulate_rounds (seeded Monte-Carlo).
"""
from __future__ import annotations

import numpy as np
import panel as pn
from bokeh.models import ColumnDataSource, Range1d, Span

from sim.speculative import RoundsParams, simulate_rounds
from widgets.base import (BLUE, CONTROL_WIDTH, GREEN, GREY, ORANGE, VERMILION, FigureView, inset_legend,
                          legend_glyph, plot, provenance, readout, rows_table, stepper, watch)

FIGURE_ID = "ch09-speculative-rounds"
TITLE = "Speculative rounds: accepted, rejected and bonus tokens"
COMPUTE = simulate_rounds
PARAMS = RoundsParams
STATES = {"low-acceptance": {"alpha": 0.5}, "long-drafts": {"k": 8}}   # named states (widgets.state)
DEFAULT = PARAMS()
K_MAX = 10
TOKEN_COLOURS = {"accepted draft": GREEN, "rejected: target's correction": VERMILION, "unchecked, thrown away": "#dddddd",
          "bonus token from the target": BLUE}
CELL = {1: GREEN, 0: VERMILION, -1: "#dddddd"}
FUTURE_ALPHA = 0.2                  # rounds the stepper has not reached yet


def build() -> FigureView:
    alpha = pn.widgets.FloatSlider(label="Acceptance per token (alpha)", start=0.0, end=1.0, step=0.05,
                                   value=DEFAULT.alpha, width=CONTROL_WIDTH)
    k = pn.widgets.IntSlider(label="Drafted tokens per round (k)", start=0, end=K_MAX, value=DEFAULT.k,
                             width=CONTROL_WIDTH)
    seed = pn.widgets.IntSlider(label="Random seed", start=0, end=9, value=DEFAULT.seed, width=CONTROL_WIDTH)
    step = stepper(DEFAULT.rounds, label="Round", interval_ms=500, start=1)

    cells = ColumnDataSource(data={"round": [], "pos": [], "color": [], "alpha": []})
    curve = ColumnDataSource(data={"k": [], "expected": []})
    point = ColumnDataSource(data={"k": [], "expected": [], "mean": []})
    running = ColumnDataSource(data={"round": [], "mean": [], "expected": []})

    p_rounds = plot("Each round's drafts, left to right from the bottom", "round", "position in the round",
                    width=590, height=230, x_range=Range1d(0.5, DEFAULT.rounds + 0.5), y_range=Range1d(0.5, K_MAX + 4))
    p_rounds.rect(x="round", y="pos", width=0.85, height=0.85, color="color", fill_alpha="alpha", line_color=None,
                  source=cells)
    inset_legend(p_rounds, [(label, legend_glyph(p_rounds, "rect", fill_color=c, line_color=None))
                            for label, c in TOKEN_COLOURS.items()], location="top_left")
    p_rounds.legend.orientation = "horizontal"

    p_k = plot("Expected tokens per round against k", "drafted tokens k", "tokens per round",
               width=290, height=250, x_range=Range1d(-0.5, K_MAX + 0.5))
    limit = Span(location=5.0, dimension="width", line_dash="dashed", line_color=GREY)
    p_k.add_layout(limit)
    formula = p_k.line("k", "expected", source=curve, line_width=2, color=BLUE)
    p_k.scatter("k", "expected", source=point, size=9, color=BLUE)
    seen = p_k.scatter("k", "mean", source=point, size=9, color=ORANGE, marker="triangle")
    inset_legend(p_k, [("(1 - a^(k+1)) / (1 - a)", formula), ("this run's mean", seen),
                       ("limit 1 / (1 - a)", legend_glyph(p_k, "line", line_color=GREY, line_dash="dashed"))],
                 location="bottom_right")

    p_run = plot("Mean tokens per round so far", "round", "tokens per round", width=290, height=250,
                 x_range=Range1d(0.5, DEFAULT.rounds + 0.5))
    mean_line = p_run.line("round", "mean", source=running, line_width=2, color=ORANGE)
    p_run.scatter("round", "mean", source=running, size=4, color=ORANGE)
    exp_line = p_run.line("round", "expected", source=running, line_width=1.5, color=BLUE, line_dash="dashed")
    inset_legend(p_run, [("running mean", mean_line), ("expected", exp_line)], location="bottom_right")
    numbers, note = readout(), readout(width=840)

    def update() -> None:
        r = simulate_rounds(RoundsParams(alpha=alpha.value, k=k.value, rounds=DEFAULT.rounds, seed=seed.value))
        n = step.value
        rounds, pos, colors, alphas = [], [], [], []
        for i in range(DEFAULT.rounds):            # rounds after the stepper's are drawn faint
            for j, state in enumerate(r.outcome[i]):
                rounds.append(i + 1), pos.append(j + 1), colors.append(CELL[int(state)])
                alphas.append(1.0 if i < n else FUTURE_ALPHA)
            if r.bonus[i]:
                rounds.append(i + 1), pos.append(k.value + 1), colors.append(BLUE)
                alphas.append(1.0 if i < n else FUTURE_ALPHA)
        cells.data = {"round": rounds, "pos": pos, "color": colors, "alpha": alphas}
        curve.data = {"k": r.k_grid, "expected": r.expected_by_k}
        point.data = {"k": [k.value], "expected": [r.expected_tokens_per_round],
                      "mean": [float(r.running_mean_tokens[n - 1])]}
        running.data = {"round": np.arange(1, n + 1), "mean": r.running_mean_tokens[:n],
                        "expected": np.full(n, r.expected_tokens_per_round)}
        limit.location = min(r.limit_tokens_per_round, K_MAX + 1)
        shown = r.outcome[:n]
        numbers.object = rows_table([
            ("round", f"{n} of {DEFAULT.rounds}"),
            ("tokens so far", f"{int(r.cumulative_tokens[n - 1])} in {n} target passes"),
            ("drafts accepted", f"{int((shown == 1).sum())}"),
            ("rejected (corrected)", f"{int((~r.bonus[:n]).sum())}"),
            ("unchecked, thrown away", f"{int((shown == -1).sum())}"),
            ("bonus tokens", f"{int(r.bonus[:n].sum())}"),
            ("mean per round", f"{r.running_mean_tokens[n - 1]:.2f}"),
            ("expected per round", f"{r.expected_tokens_per_round:.3f}"),
            ("limit as k grows", "none (every draft accepted)" if alpha.value == 1 else
             f"{r.limit_tokens_per_round:.2f}"),
        ])
        note.object = provenance(
            f"A seeded Monte-Carlo run of {DEFAULT.rounds} rounds (seed {seed.value}): each draft is accepted with "
            "probability alpha independently of the others, the simplification under which the expected yield has "
            "the closed form of Leviathan et al. (ICML 2023). Real drafters' acceptance varies with position and "
            "context. With k = 0 every round is a plain decode step: one token from the target, drawn here as a "
            "bonus.")

    watch([alpha, k, seed, step], update)
    update()
    layout = pn.Column(
        pn.Row(pn.Column(alpha, k, seed, step, numbers, width=CONTROL_WIDTH + 20),
               pn.Column(pn.pane.Bokeh(p_rounds), pn.Row(pn.pane.Bokeh(p_k), pn.pane.Bokeh(p_run)))),
        note)
    return FigureView(FIGURE_ID, layout, controls={"alpha": alpha, "k": k, "seed": seed, "step": step},
                      sources={"cells": cells, "curve": curve, "point": point, "running": running},
                      readouts={"numbers": numbers, "note": note}, plots=[p_rounds, p_k, p_run])
