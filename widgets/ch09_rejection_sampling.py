"""ch09-rejection-sampling: the acceptance rule leaves the target's distribution unchanged.

A drafted token x ~ q is kept with probability min(1, p(x) / q(x)); when it is rejected,
the replacement is drawn from the normalised residual max(0, p - q). Per token, the
emitted share is min(p, q) + max(0, p - q) = p: the target's distribution, whatever the
draft. The figure draws a draft, applies the rule to many samples, and compares the
emitted histogram with the target by a chi-square test.

Controls: the draft distribution (four presets against one fixed target over six
tokens), the number of samples, and the seed. One call per update:
sim.speculative.demonstrate_rejection_sampling.
"""
from __future__ import annotations

import numpy as np
import panel as pn
from bokeh.models import ColumnDataSource

from sim.speculative import (CHI_SQUARE_LEVEL, DRAFT_PRESETS, REJECTION_TARGET, RejectionParams,
                             demonstrate_rejection_sampling)
from widgets.base import (BLUE, CONTROL_WIDTH, GREY, FigureView, inset_legend, label_ticks, plot, provenance,
                          readout, rows_table, watch)

FIGURE_ID = "ch09-rejection-sampling"
TITLE = "The acceptance rule: emitted tokens against the target distribution"
COMPUTE = demonstrate_rejection_sampling
PARAMS = RejectionParams
STATES = {"many-samples": {"samples": 200000}, "seed-3": {"seed": 3}}   # named states (widgets.state)
DEFAULT = PARAMS()
TOKENS = ["the", "a", "one", "this", "my", "our"]        # labels for the six tokens of the demo
SAMPLES = {"1,000": 1_000, "20,000": 20_000, "200,000": 200_000}


def build() -> FigureView:
    draft_label = pn.pane.HTML("Draft distribution q", width=CONTROL_WIDTH, margin=(6, 10, 0, 10))
    draft = pn.widgets.RadioButtonGroup(options=DRAFT_PRESETS, value=DEFAULT.draft, width=CONTROL_WIDTH)
    samples = pn.widgets.Select(label="Samples", options=SAMPLES, value=DEFAULT.samples, width=CONTROL_WIDTH)
    seed = pn.widgets.IntSlider(label="Random seed", start=0, end=9, value=DEFAULT.seed, width=CONTROL_WIDTH)

    bars = ColumnDataSource(data={"x_draft": [], "x_out": [], "draft": [], "emitted": [], "x0": [], "x1": [],
                                  "target": []})
    p = plot("Share of each token", "token", "probability", width=560, height=320)
    q_bars = p.vbar(x="x_draft", top="draft", width=0.3, color=GREY, alpha=0.6, source=bars)
    out_bars = p.vbar(x="x_out", top="emitted", width=0.3, color=BLUE, source=bars)
    target = p.segment(x0="x0", y0="target", x1="x1", y1="target", line_color="#111", line_width=3, source=bars)
    label_ticks(p.xaxis, dict(enumerate(TOKENS)))
    p.y_range.start = 0
    inset_legend(p, [("draft q (what is proposed)", q_bars), ("emitted after the rule", out_bars),
                     ("target p", target)])
    numbers, note = readout(width=300), readout(width=840)

    def update() -> None:
        r = demonstrate_rejection_sampling(RejectionParams(target=REJECTION_TARGET, draft=draft.value,
                                                           samples=samples.value, seed=seed.value))
        x = np.arange(len(r.target))
        bars.data = {"x_draft": x - 0.17, "x_out": x + 0.17, "draft": r.draft, "emitted": r.empirical_output,
                     "x0": x - 0.4, "x1": x + 0.4, "target": r.target}
        verdict = "consistent with p" if r.chi_square < r.chi_square_critical else "rejects p at this level"
        numbers.object = rows_table([
            ("acceptance, exact", f"{r.acceptance_rate:.3f} = \u03a3 min(p, q)"),
            ("acceptance, sampled", f"{r.empirical_acceptance_rate:.3f}"),
            ("largest |emitted - p|", f"{r.max_abs_error_empirical:.4f}"),
            ("exact rule, largest error", f"{r.max_abs_error_exact:.1e}"),
            ("chi-square", f"{r.chi_square:.2f} ({r.chi_square_dof} degrees of freedom)"),
            ("p-value", f"{r.chi_square_p_value:.3f}"),
            (f"critical value at {CHI_SQUARE_LEVEL:.1%}", f"{r.chi_square_critical:.2f}: {verdict}"),
            ("drafts emitted unchecked", f"chi-square about {r.draft_chi_square:,.0f}"),
        ])
        note.object = provenance(
            f"{r.samples:,} seeded draws (seed {seed.value}) of one drafted position through the rule of Leviathan "
            "et al. (ICML 2023) and Chen et al. (2023); the target and the draft presets are made-up distributions "
            "over six tokens. Chi-square = \u03a3 (count - n p)\u00b2 / (n p); if the emitted tokens follow p, it "
            f"follows a chi-square law with {r.chi_square_dof} degrees of freedom and its p-value is uniform on "
            "[0, 1]. The last row is the statistic the draft's own shares would give (n \u03a3 (q - p)\u00b2 / p). "
            "The exact row enumerates the rule instead of sampling it.")

    watch([draft, samples, seed], update)
    update()
    layout = pn.Column(
        pn.Row(pn.Column(draft_label, draft, samples, seed, numbers, width=CONTROL_WIDTH + 60),
               pn.pane.Bokeh(p)),
        note)
    return FigureView(FIGURE_ID, layout, controls={"draft": draft, "samples": samples, "seed": seed},
                      sources={"bars": bars}, readouts={"numbers": numbers, "note": note}, plots=[p])
