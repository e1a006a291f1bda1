"""ch07-paging: a paged KV cache with block tables and prefix caching, step by step.

Four requests A-D share a system prompt. The cache is a pool of 24 physical blocks of
16 tokens; each request's block table maps its logical blocks to physical ones, and a
block is taken only when a request's tokens spill into it. A block that fills up gets
a hash chained with the previous block's, so a hash names the whole prefix up to that
block: with prefix caching on, a later request whose leading blocks hash the same
maps them to the same physical blocks (reference count > 1) and skips their prefill.
With it off, the system prompt is stored once per request and D recomputes all of it.

Below, a second panel compares reserving a contiguous max-length slab per request with
allocating 16-token blocks: the share of reserved KV slots that stay empty.

Controls: step (a stepper through the replay), prefix caching on/off, system prompt
length; for the waste panel, the length a contiguous allocator reserves and the block
size. One call: sim.paging.compare_prefix_caching, when the system prompt or a waste
control changes (its result carries the waste panel's numbers); stepping and the caching
switch only pick a frame of its result.
"""
from __future__ import annotations

import panel as pn
from bokeh.models import ColumnDataSource, DataRange1d, Legend, LegendItem, Range1d

from sim.paging import PagingParams, WasteParams, compare_prefix_caching
from widgets.base import (BLUE, CONTROL_WIDTH, GREEN, ORANGE, PURPLE, SKY, VERMILION, FigureView, legend_glyph,
                          plot, provenance, readout, rows_table, stepper, watch)

FIGURE_ID = "ch07-paging"
TITLE = "A paged KV cache: block tables, shared prefix blocks, and the memory contiguous slabs waste"
COMPUTE = compare_prefix_caching
PARAMS = PagingParams                     # default: 4 requests, 24 blocks of 16 tokens
DEFAULT = PARAMS()
STATES = {  # named states (widgets.state), as the chapter uses them
    "no-caching": {"caching": False},
    "last-step": {"step": 20}}
WASTE = WasteParams()                     # 64 requests, lognormal lengths
SYSTEM_PROMPTS = {"8 tokens (under one block)": 8, "40 tokens (2 full blocks + 8)": 40,
                  "64 tokens (4 full blocks)": 64, "128 tokens (8 full blocks)": 128}
RESERVATIONS = {"1,024 tokens": 1024, "2,048 tokens": 2048, "4,096 tokens": 4096, "8,192 tokens": 8192}
BLOCK_SIZES = {"8 tokens": 8, "16 tokens (vLLM default)": 16, "32 tokens": 32, "64 tokens": 64,
               "256 tokens": 256}

COLUMNS = 8                               # physical blocks drawn per row of the pool
OWNER_COLOURS = [BLUE, ORANGE, GREEN, PURPLE]
SHARED, CACHED, FREE = VERMILION, "#cfe6f5", "#efefef"
INK_DARK, INK_LIGHT = "#333333", "#ffffff"


def _colour(state: str, owners: str, requests: list[str]) -> str:
    """Pool colour of one block: its single owner's, shared, cached or free."""
    if state == "free":
        return FREE
    if state == "cached":
        return CACHED
    names = owners.split(",")
    return SHARED if len(names) > 1 else OWNER_COLOURS[requests.index(names[0]) % len(OWNER_COLOURS)]


def build() -> FigureView:
    n_blocks = DEFAULT.num_blocks
    state: dict = {"comparison": compare_prefix_caching(DEFAULT)}
    step = stepper(len(state["comparison"].with_caching.frames), label="Step")
    caching = pn.widgets.Checkbox(label="Prefix caching (share equal full blocks)", value=True,
                                  width=CONTROL_WIDTH)
    system = pn.widgets.Select(label="Shared system prompt", options=SYSTEM_PROMPTS,
                               value=DEFAULT.system_prompt_tokens, width=CONTROL_WIDTH)
    reserve = pn.widgets.Select(label="Contiguous: reserved per request", options=RESERVATIONS,
                                value=WASTE.max_seq_len, width=CONTROL_WIDTH)
    block = pn.widgets.Select(label="Paged: block size", options=BLOCK_SIZES, value=WASTE.block_size,
                              width=CONTROL_WIDTH)

    # -- the physical block pool: 3 rows of 8 blocks, block id = row x 8 + column
    pool = ColumnDataSource(data={"x": [], "y": [], "tx": [], "ty": [], "ty2": [], "colour": [], "ink": [],
                                  "label": [], "detail": [], "state": [], "refs": [], "fill": []})
    rows = (n_blocks + COLUMNS - 1) // COLUMNS
    p_pool = plot(f"Physical block pool ({DEFAULT.block_size} tokens per block)", "", "", width=580, height=70 * rows + 70,
                  x_range=Range1d(-1.45, COLUMNS - 0.5), y_range=Range1d(-0.5, rows - 0.5))
    p_pool.rect("x", "y", width=0.94, height=0.9, source=pool, fill_color="colour", line_color="#999999",
                line_width=0.5)
    p_pool.text("tx", "ty", text="label", source=pool, text_color="ink", text_font_size="11px",
                text_font_style="bold")
    p_pool.text("tx", "ty2", text="detail", source=pool, text_color="ink", text_font_size="11px")
    row_labels = ColumnDataSource(data={"x": [-1.4] * rows, "y": [rows - 1 - r - 0.1 for r in range(rows)],
                                        "text": [f"P{r * COLUMNS}-{r * COLUMNS + COLUMNS - 1}" for r in range(rows)]})
    p_pool.text("x", "y", text="text", source=row_labels, text_color="#666666", text_font_size="11px")
    # the legend (the pool's own rects take their colour from the data)
    keys = [*((f"{chr(65 + i)} only", c) for i, c in enumerate(OWNER_COLOURS[:len(DEFAULT.user_tokens)])),
            ("shared", SHARED), ("cached, unused", CACHED), ("free", FREE)]
    p_pool.add_layout(Legend(items=[LegendItem(label=label, renderers=[legend_glyph(
        p_pool, "quad", fill_color=colour, line_color="#999999", line_width=0.5)]) for label, colour in keys], orientation="horizontal", label_text_font_size="11px", padding=2, margin=2,
        spacing=6, glyph_width=14), "above")

    # -- block tables: one row per request, one cell per logical block
    tables = ColumnDataSource(data={"x": [], "y": [], "tx": [], "ty": [], "colour": [], "label": [], "request": [],
                                    "logical": [], "physical": []})
    names = ColumnDataSource(data={"x": [], "y": [], "text": []})
    n_req = len(DEFAULT.user_tokens)
    p_tab = plot("Block tables: logical block -> physical block", "", "", width=580, height=34 * n_req + 60,
                 x_range=Range1d(-2.6, 10.5), y_range=Range1d(-0.6, n_req - 0.4))
    p_tab.rect("x", "y", width=0.92, height=0.8, source=tables, fill_color="colour", line_color="#999999",
               line_width=0.5)
    p_tab.text("tx", "ty", text="label", source=tables, text_color=INK_LIGHT, text_font_size="11px",
               text_font_style="bold")
    p_tab.text("x", "y", text="text", source=names, text_color="#333333", text_font_size="11px")
    for p in (p_pool, p_tab):
        p.axis.visible = False
        p.grid.visible = False
        p.outline_line_color = None
        p.toolbar_location = None

    # -- contiguous slabs vs blocks, one bar per request
    waste = ColumnDataSource(data={"request": [], "used": [], "paged": [], "contiguous": []})
    p_waste = plot("KV slots per request: reserved vs used", f"request ({WASTE.requests} with lognormal lengths)",
                   "KV slots (tokens)", width=580, height=250,
                   y_range=DataRange1d(start=0))
    r_cont = p_waste.vbar("request", top="contiguous", width=0.8, source=waste, fill_color="#e3e3e3",
                          line_color="#e3e3e3")
    r_paged = p_waste.vbar("request", top="paged", width=0.8, source=waste, fill_color=SKY, line_color=SKY)
    r_used = p_waste.vbar("request", top="used", width=0.8, source=waste, fill_color=BLUE, line_color=BLUE)
    p_waste.add_layout(Legend(items=[LegendItem(label="reserved, contiguous slab", renderers=[r_cont]),
                                     LegendItem(label="reserved, whole blocks", renderers=[r_paged]),
                                     LegendItem(label="used", renderers=[r_used])],
                              orientation="horizontal", label_text_font_size="11px", padding=2, margin=2),
                       "above")

    description = readout(width=570)
    counts = readout()
    compare = readout()
    waste_numbers = readout()
    note = readout(width=860)

    def show() -> None:
        """Draw the chosen frame of the replay that is switched on (no sim call)."""
        c = state["comparison"]
        run = c.with_caching if caching.value else c.without_caching
        last = len(run.frames) - 1
        if step.end != last or step.value > last:
            step.param.update(end=last, value=min(step.value, last))   # re-enters show() if the value moved
        f = run.frames[min(step.value, last)]
        colours = [_colour(s, o, run.requests) for s, o in zip(f.block_states, f.block_owners)]
        refs = [int(x) for x in f.ref_counts]
        fills = [int(x) for x in f.fill_tokens]
        cols = [b % COLUMNS for b in range(n_blocks)]
        ys = [rows - 1 - b // COLUMNS for b in range(n_blocks)]
        pool.data = {
            "x": cols, "y": ys, "tx": [x - 0.42 for x in cols], "ty": [y + 0.08 for y in ys],
            "ty2": [y - 0.3 for y in ys],
            "colour": colours,
            "ink": [INK_DARK if s != "used" else INK_LIGHT for s in f.block_states],
            "label": [f"P{b}" + (f"  x{refs[b]}" if refs[b] > 1 else "") for b in range(n_blocks)],
            "detail": [h if h else (f"{fills[b]}/{DEFAULT.block_size}" if fills[b] else "")
                       for b, h in enumerate(f.block_hashes)],
            "state": list(f.block_states), "refs": refs, "fill": fills,
        }
        xs, ys, cs, labels, reqs, logical, physical = [], [], [], [], [], [], []
        for i, r in enumerate(run.requests):
            for j, b in enumerate(f.block_tables.get(r, [])):
                xs.append(j)
                ys.append(n_req - 1 - i)
                cs.append(colours[b])
                labels.append(f"P{b}")
                reqs.append(r)
                logical.append(j)
                physical.append(b)
        tables.data = {"x": xs, "y": ys, "tx": [x - 0.3 for x in xs], "ty": [y - 0.15 for y in ys], "colour": cs, "label": labels, "request": reqs,
                       "logical": logical, "physical": physical}
        names.data = {"x": [-2.5] * n_req, "y": [n_req - 1 - i - 0.15 for i in range(n_req)],
                      "text": [f"{r}: " + (f"{len(f.block_tables[r])} blocks" if r in f.block_tables else "no blocks")
                               for r in run.requests]}
        description.object = (f'<p style="margin:2px 0"><b>Step {f.step} of {last}</b> '
                              f'(prefix caching {"on" if caching.value else "off"}): {f.description}.</p>')
        shared = sum(1 for r in refs if r > 1)
        counts.object = rows_table([
            ("blocks in use", f"{f.block_states.count('used')} of {n_blocks}"),
            ("shared by 2+ requests", f"{shared}"),
            ("cached, unused", f"{f.block_states.count('cached')}"),
            ("free", f"{f.block_states.count('free')}"),
        ])

    def recompute(new: bool = True) -> None:
        if new:
            state["comparison"] = compare_prefix_caching(PagingParams(
                system_prompt_tokens=system.value, waste=WasteParams(max_seq_len=reserve.value, block_size=block.value)))
        c = state["comparison"]
        on, off = c.with_caching, c.without_caching
        longest = max(len(t) for run in (on, off) for f in run.frames for t in f.block_tables.values())
        p_tab.x_range.end = max(longest, 8) - 0.5
        row = "<tr><th>{}</th><td>{}</td><td>{}</td></tr>".format
        body = "".join([
            row("fresh blocks allocated", on.blocks_allocated, off.blocks_allocated),
            row("most blocks held", on.peak_used_blocks, off.peak_used_blocks),
            '<tr><th colspan="3" style="text-align:left">prefill tokens computed</th></tr>',
            *(row(f"request {r}", on.prefill_tokens_computed[r], off.prefill_tokens_computed[r])
              for r in on.requests)])
        compare.object = (
            '<table class="fig-numbers"><tr><th>whole replay</th><th>caching<br>on</th><th><br>off</th></tr>'
            f"{body}</table>"
            f'<p style="margin:2px 0;font-size:13px">Caching saves <b>{c.blocks_saved}</b> block allocations '
            f"(<b>{c.peak_blocks_saved}</b> at the peak) and <b>{c.prefill_tokens_saved}</b> prefill tokens.</p>")
        w = c.waste
        waste.data = {"request": list(range(1, len(w.lengths_tokens) + 1)), "used": w.lengths_tokens,
                      "paged": w.paged_reserved_tokens, "contiguous": w.contiguous_reserved_tokens}
        waste_numbers.object = rows_table([
            ("unused, contiguous", f"{100 * w.contiguous_waste_fraction:.1f}% of reserved"),
            ("unused, paged", f"{100 * w.paged_waste_fraction:.1f}% of reserved"),
            ("KV slots used", f"{w.used_tokens:,} tokens"),
        ])
        note.object = provenance(c.note)
        show()

    watch([step, caching], show)
    watch([system, reserve, block], recompute)
    recompute(new=False)
    layout = pn.Column(
        pn.Row(pn.Column(step, caching, system, counts, compare, width=CONTROL_WIDTH + 20),
               pn.Column(description, pn.pane.Bokeh(p_pool), pn.pane.Bokeh(p_tab))),
        pn.Row(pn.Column(reserve, block, waste_numbers, width=CONTROL_WIDTH + 20), pn.pane.Bokeh(p_waste)),
        note)
    return FigureView(FIGURE_ID, layout,
                      controls={"step": step, "caching": caching, "system": system, "reserve": reserve,
                                "block": block},
                      sources={"pool": pool, "tables": tables, "names": names, "waste": waste},
                      readouts={"description": description, "counts": counts, "compare": compare,
                                "waste": waste_numbers, "note": note},
                      plots=[p_pool, p_tab, p_waste])
