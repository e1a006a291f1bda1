"""ch03-hierarchy: the GPU's memories, from registers to HBM, drawn to scale.

Every level of the hierarchy trades size for speed: the register files and shared
memory of all SMs together hold a few tens of MB but feed the cores at tens to hundreds
of TB/s, while HBM holds the whole model and moves a few TB/s. Both bars use log axes,
so each grid line is a factor of ten. Bars are coloured by where their number comes
from: a datasheet (or a published per-clock figure), derived from the clock and the
width of the hardware, or assumed; a level whose number cannot be given is marked so.

Controls: GPU. One call: sim.hardware.memory_hierarchy.
"""
from __future__ import annotations

import panel as pn
from bokeh.models import ColumnDataSource, FactorRange, Legend, LegendItem, Range1d

from sim.hardware import HierarchyParams, memory_hierarchy
from widgets.base import (BLUE, CONTROL_WIDTH, GREEN, GREY, ORANGE, FigureView, gpu_select, plot, provenance, readout,
                          watch)

FIGURE_ID = "ch03-hierarchy"
TITLE = "The GPU memory hierarchy: capacity and bandwidth of each level"
COMPUTE = memory_hierarchy
PARAMS = HierarchyParams
STATES = {"h200": {"gpu": "H200"}, "b200": {"gpu": "B200"}}   # named states (widgets.state), as the chapter uses them

# basis keyword (the first word of HierarchyResult.bandwidth_basis) -> legend group
GROUPS = {"datasheet": "published", "published": "published", "derived": "derived", "assumed": "assumed"}
COLOURS = {"published": BLUE, "derived": GREEN, "assumed": ORANGE}
LEGEND = {"published": "published", "derived": "derived", "assumed": "assumed"}
CAP_RANGE_MB = (1.0, 1e7)          # x axis of the capacity plot, MB
BW_RANGE_TBS = (0.1, 1e4)          # x axis of the bandwidth plot, TB/s


def build() -> FigureView:
    gpu = gpu_select()

    cap = ColumnDataSource(data={"level": [], "left": [], "mb": [], "text": []})
    bw = {k: ColumnDataSource(data={"level": [], "left": [], "tbs": [], "text": []}) for k in COLOURS}
    unknown = ColumnDataSource(data={"level": [], "x": [], "text": []})
    levels = FactorRange(factors=["HBM", "L2 cache", "shared memory / L1", "registers"])

    p_cap = plot("Capacity (whole chip)", "MB (log scale)", "", x_type="log", y_type="auto", width=300, height=290,
                 y_range=levels, x_range=Range1d(*CAP_RANGE_MB))
    p_cap.hbar(y="level", left="left", right="mb", height=0.6, source=cap, color=GREY, alpha=0.8)
    p_cap.text(x="mb", y="level", text="text", source=cap, x_offset=4, y_offset=6, text_font_size="11px",
               text_color="#333")

    p_bw = plot("Bandwidth (whole chip)", "TB/s (log scale)", "", x_type="log", y_type="auto", width=300, height=290,
                y_range=levels, x_range=Range1d(*BW_RANGE_TBS))
    items = []
    for key, src in bw.items():
        r = p_bw.hbar(y="level", left="left", right="tbs", height=0.6, source=src, color=COLOURS[key], alpha=0.85)
        p_bw.text(x="tbs", y="level", text="text", source=src, x_offset=4, y_offset=6, text_font_size="11px",
                  text_color="#333")
        items.append(LegendItem(label=LEGEND[key], renderers=[r]))
    p_bw.text(x="x", y="level", text="text", source=unknown, y_offset=6, text_font_size="11px", text_color=GREY)
    p_bw.add_layout(Legend(items=items, orientation="horizontal", label_text_font_size="10px", padding=2,
                           spacing=6, margin=4), "below")
    for p in (p_cap, p_bw):
        p.yaxis.major_label_text_font_size = "11px"
        p.ygrid.grid_line_color = None
    p_bw.yaxis.major_label_text_font_size = "0px"     # the capacity plot beside it names the levels

    numbers, table, note = readout(), readout(width=600), readout(width=860)

    def update() -> None:
        r = memory_hierarchy(HierarchyParams(gpu=gpu.value))
        levels.factors = list(reversed(r.levels))
        cap.data = {"level": r.levels, "left": [CAP_RANGE_MB[0]] * len(r.levels),
                    "mb": (r.capacity_bytes / 1e6).tolist(),
                    "text": r.capacity_text}
        rows = {k: {"level": [], "left": [], "tbs": [], "text": []} for k in COLOURS}
        missing = {"level": [], "x": [], "text": []}
        for lv, b, basis, text in zip(r.levels, r.bandwidth_bytes_per_s, r.bandwidth_basis, r.bandwidth_text):
            group = GROUPS.get(basis.split(":")[0])
            if group is None or not b == b:       # nan: no figure can be given
                missing["level"].append(lv)
                missing["x"].append(BW_RANGE_TBS[0] * 1.3)
                missing["text"].append("not known: " + basis.split(": ", 1)[-1])
                continue
            rows[group]["level"].append(lv)
            rows[group]["left"].append(BW_RANGE_TBS[0])
            rows[group]["tbs"].append(float(b) / 1e12)
            rows[group]["text"].append(text)
        for k, src in bw.items():
            src.data = rows[k]
        unknown.data = missing
        dram = r.levels[-1]
        numbers.object = (
            f'<table class="fig-numbers"><tr><th></th><th>capacity</th><th>bandwidth</th></tr>'
            + "".join(f"<tr><th>{lv}</th><td>{c}{f' (1/{k:,.0f} of {dram})' if lv != dram else ''}</td>"
                      f"<td>{b}{f' ({x:,.0f}x {dram})' if x == x and lv != dram else ''}</td></tr>"
                      for lv, c, b, x, k in zip(r.levels, r.capacity_text, r.bandwidth_text,
                                                r.bandwidth_over_dram, r.dram_over_capacity))
            + "</table>")
        table.object = ('<table class="fig-numbers fig-basis"><tr><th>level</th><th>where the bandwidth comes from'
                        '</th></tr>' + "".join(f"<tr><th>{lv}</th><td>{basis}</td></tr>"
                                               for lv, basis in zip(r.levels, r.bandwidth_basis)) + "</table>")
        note.object = provenance(r.note)

    watch([gpu], update)
    update()
    layout = pn.Column(
        pn.Row(pn.Column(gpu, numbers, width=CONTROL_WIDTH + 20),
               pn.Column(pn.Row(pn.pane.Bokeh(p_cap), pn.pane.Bokeh(p_bw)), table)),
        note)
    return FigureView(FIGURE_ID, layout, controls={"gpu": gpu},
                      sources={"capacity": cap, **{f"bandwidth_{k}": s for k, s in bw.items()},
                               "unknown": unknown},
                      readouts={"numbers": numbers, "basis": table, "note": note}, plots=[p_cap, p_bw])
