"""ch13-engines: which inference engine does what, and which ones fit a deployment's needs.

A grid of engines by features, each cell coloured by what the engine's documentation states
(yes, partly, no, not confirmed), with the detail and its source on hover and in a folded
table under the grid (for a keyboard, a screen reader or a touch screen); the last column
says whether the engine meets every need chosen on the left, and the list under the grid
gives the reason for each engine.

Controls: hardware, checkpoint format, multi-GPU layout, prefix reuse, speculative decoding,
whether unmaintained engines count. One call: sim.engines.choose_engines.
"""
from __future__ import annotations

import panel as pn
from bokeh.models import ColumnDataSource, HoverTool, Range1d

from sim.engines import (AS_OF, ENGINES, FEATURES, HARDWARE, MULTI_GPU_NEEDS, QUANT_NEEDS, EngineNeedsParams,
                         choose_engines)
from widgets.base import (CONTROL_WIDTH, GREEN, GREY, VERMILION, YELLOW, FigureView, details_table, inset_legend,
                          label_ticks, legend_glyph, plot, provenance, readout, watch)

FIGURE_ID = "ch13-engines"
TITLE = "Inference engines feature by feature, and the ones that fit your needs"
COMPUTE = choose_engines
PARAMS = EngineNeedsParams
STATES = {"amd": {"hardware": "amd"}, "apple-gguf": {"hardware": "apple", "quant": "gguf"}}   # named states (widgets.state)
STATUS_COLOURS = {"yes": GREEN, "partial": YELLOW, "no": VERMILION, "not confirmed": GREY}
STATUS_TEXT = {"yes": "yes", "partial": "partly", "no": "no", "not confirmed": "?"}


def build() -> FigureView:
    d = EngineNeedsParams()
    hardware = pn.widgets.Select(label="Hardware", options={v: k for k, v in HARDWARE.items()}, value=d.hardware,
                                 width=CONTROL_WIDTH)
    quant = pn.widgets.Select(label="Checkpoint format to load", options={v: k for k, v in QUANT_NEEDS.items()},
                              value=d.quantization, width=CONTROL_WIDTH)
    multi = pn.widgets.Select(label="Multi-GPU", options={v: k for k, v in MULTI_GPU_NEEDS.items()},
                              value=d.multi_gpu, width=CONTROL_WIDTH)
    prefix = pn.widgets.Checkbox(label="Requests share long prefixes", value=d.prefix_reuse, width=CONTROL_WIDTH)
    spec = pn.widgets.Checkbox(label="Speculative decoding", value=d.speculative, width=CONTROL_WIDTH)
    old = pn.widgets.Checkbox(label="Include unmaintained engines", value=d.include_unmaintained,
                              width=CONTROL_WIDTH)

    cells = ColumnDataSource(data={"x": [], "y": [], "colour": [], "text": [], "detail": [], "source": []})
    n_rows, n_cols = len(ENGINES), len(FEATURES) + 1
    p = plot("What each engine's documentation states", "", "", width=760, height=330,
             x_range=Range1d(-0.5, n_cols - 0.5), y_range=Range1d(n_rows - 0.5, -0.5))
    p.rect(x="x", y="y", width=0.96, height=0.92, source=cells, fill_color="colour", line_color="white",
           fill_alpha=0.85)
    p.text(x="x", y="y", text="text", source=cells, text_align="center", text_baseline="middle",
           text_font_size="11px", text_color="#111")
    p.add_tools(HoverTool(tooltips=[("", "@detail"), ("source", "@source")]))
    p.xaxis.major_label_orientation = 0.6
    p.grid.grid_line_color = None
    inset_legend(p, [(label, legend_glyph(p, "rect", fill_color=STATUS_COLOURS[s], line_color=None))
                     for s, label in (("yes", "yes"), ("partial", "partly"), ("no", "no"),
                                      ("not confirmed", "not confirmed"))], location="bottom_left")
    choice, cells_note, note = readout(width=760), readout(width=1000), readout(width=1000)

    def update() -> None:
        r = choose_engines(EngineNeedsParams(hardware=hardware.value, quantization=quant.value,
                                             multi_gpu=multi.value, prefix_reuse=prefix.value,
                                             speculative=spec.value, include_unmaintained=old.value))
        label_ticks(p.yaxis, dict(enumerate(r.engines)))
        label_ticks(p.xaxis, dict(enumerate([*r.features, "fits your needs"])))
        cols = {k: [] for k in cells.data}

        def add(*values) -> None:
            for key, v in zip(cols, values):
                cols[key].append(v)

        for i in range(len(r.engines)):
            for j, s in enumerate(r.status[i]):
                add(j, i, STATUS_COLOURS[s], STATUS_TEXT[s], r.detail[i][j], f"{r.source[i][j]}, read {r.as_of[i][j]}")
            ok = bool(r.fits[i])
            add(len(r.features), i, GREEN if ok else VERMILION, "fits" if ok else "no", r.reasons[i],
                "the needs on the left")
        cells.data = cols
        items = "".join(f"<li><b>{name}</b>: {why}</li>" for name, ok, why in zip(r.engines, r.fits, r.reasons)
                        if ok)
        others = "".join(f"<li>{name}: {why}</li>" for name, ok, why in zip(r.engines, r.fits, r.reasons)
                         if not ok)
        choice.object = (f"<p>Needs: {', '.join(r.needs)}.</p><p>Fit:</p><ul>{items or '<li>none</li>'}</ul>"
                         f"<p>Do not fit:</p><ul>{others or '<li>none</li>'}</ul>")
        cells_note.object = details_table(
            "Every cell: what the documentation states, and where",
            ("engine", "feature", "status", "statement", "source, read on"),
            [(name, feature, STATUS_TEXT[s], r.detail[i][j], f"{r.source[i][j]}, {r.as_of[i][j]}")
             for i, name in enumerate(r.engines) for j, (feature, s) in enumerate(zip(r.features, r.status[i]))])
        note.object = provenance(f"{r.note} Hover over a cell, or open the table above, for the statement and its "
                                 f"source key. Documentation read on {AS_OF}.")

    watch([hardware, quant, multi, prefix, spec, old], update)
    update()
    layout = pn.Column(
        pn.Row(pn.Column(hardware, quant, multi, prefix, spec, old, width=CONTROL_WIDTH + 20), pn.pane.Bokeh(p)),
        choice, cells_note, note)
    return FigureView(FIGURE_ID, layout,
                      controls={"hardware": hardware, "quant": quant, "multi": multi, "prefix": prefix,
                                "spec": spec, "old": old},
                      sources={"cells": cells}, readouts={"choice": choice, "cells_note": cells_note, "note": note},
                      plots=[p])
