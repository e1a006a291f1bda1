"""ch15-checklist: from a symptom to the measurements that tell its causes apart.

Pick a symptom: the diagram shows what to measure and the likely causes in the order to
rule them out; the table below says how to confirm each cause, the usual fix, and links
to the chapters and figures that explain it.

Controls: symptom. One call: sim.checklist.checklist.
"""
from __future__ import annotations

import html
import textwrap

import panel as pn
from bokeh.models import ColumnDataSource, Range1d

from sim.checklist import SYMPTOMS, ChecklistParams, checklist
from widgets.base import BLUE, CONTROL_WIDTH, GREY, ORANGE, VERMILION, FigureView, plot, provenance, readout, watch

FIGURE_ID = "ch15-checklist"
TITLE = "A checklist for a slow deployment: symptom, measurements, likely causes"
COMPUTE = checklist
PARAMS = ChecklistParams
STATES = {"out-of-memory": {"symptom": "out-of-memory"}, "outputs-differ": {"symptom": "outputs-differ"}}   # named states (widgets.state)
ROWS = 5          # the most causes a symptom lists; rows of the diagram


def _ys(n: int) -> list[float]:
    return [ROWS - 1 - i * (ROWS - 1) / max(n - 1, 1) for i in range(n)] if n > 1 else [(ROWS - 1) / 2]


def _links(links) -> str:
    return ", ".join(f'<a href="{html.escape(link.href)}">{html.escape(link.label)}</a>' for link in links)


def build() -> FigureView:
    d = PARAMS()
    symptom = pn.widgets.RadioBoxGroup(options={s.title: k for k, s in SYMPTOMS.items()}, value=d.symptom,
                                       width=CONTROL_WIDTH)
    label = pn.pane.HTML("Symptom", width=CONTROL_WIDTH, margin=(6, 10, 0, 10))

    boxes = ColumnDataSource(data={"x": [], "y": [], "text": [], "colour": []})
    edges = ColumnDataSource(data={"x0": [], "y0": [], "x1": [], "y1": []})
    p = plot("", "", "", width=640, height=300, x_range=Range1d(-0.55, 2.55), y_range=Range1d(-0.6, ROWS - 0.25))
    p.segment("x0", "y0", "x1", "y1", source=edges, color=GREY, line_width=1.2)
    p.rect("x", "y", width=0.8, height=0.7, source=boxes, fill_color="colour", fill_alpha=0.18,
           line_color="colour")
    p.text("x", "y", text="text", source=boxes, text_align="center", text_baseline="middle", text_font_size="11px")
    for x, head in ((0, "symptom"), (1, "measure"), (2, "likely causes, in order")):
        p.text([x], [ROWS - 0.5], text=[head], text_align="center", text_baseline="middle", text_font_size="11px",
               text_color="#555")
    p.axis.visible = False
    p.grid.visible = False
    table, note = readout(width=900), readout(width=900)

    def update() -> None:
        r = checklist(ChecklistParams(symptom=symptom.value))
        ym, yc = _ys(len(r.measure_short)), _ys(len(r.cause_short))
        y0 = (ROWS - 1) / 2
        boxes.data = {"x": [0] + [1] * len(ym) + [2] * len(yc), "y": [y0, *ym, *yc],
                      "text": [textwrap.fill(r.title, 18), *r.measure_short, *(f"{i}. {c}" for i, c in enumerate(r.cause_short, 1))],
                      "colour": [VERMILION] + [BLUE] * len(ym) + [ORANGE] * len(yc)}
        edges.data = {"x0": [0.4] * len(ym) + [1.4] * len(yc), "y0": [y0] * (len(ym) + len(yc)),
                      "x1": [0.6] * len(ym) + [1.6] * len(yc), "y1": [*ym, *yc]}
        measure = "".join(f"<li><b>{html.escape(s)}</b>: {html.escape(m)}</li>"
                          for s, m in zip(r.measure_short, r.measure))
        rows = "".join(
            f"<tr><td>{i}</td><td>{html.escape(c)}</td><td>{html.escape(k)}</td><td>{html.escape(f)}</td>"
            f"<td>{_links(links)}</td></tr>"
            for i, (c, k, f, links) in enumerate(zip(r.causes, r.confirm, r.fixes, r.links), 1))
        table.object = (f"<p><b>Measure</b></p><ul>{measure}</ul>"
                        '<table class="fig-numbers"><tr><th>#</th><th>likely cause</th><th>confirm it by</th>'
                        f"<th>usual fix</th><th>read</th></tr>{rows}</table>")
        note.object = provenance(r.note)

    watch([symptom], update)
    update()
    layout = pn.Column(pn.Row(pn.Column(label, symptom, width=CONTROL_WIDTH + 20), pn.pane.Bokeh(p)), table, note)
    return FigureView(FIGURE_ID, layout, controls={"symptom": symptom}, sources={"boxes": boxes, "edges": edges},
                      readouts={"table": table, "note": note}, plots=[p])
