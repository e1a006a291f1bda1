"""ch08-flash: HBM traffic of naive attention vs tiled (FlashAttention) attention.

Naive attention writes the N x N score matrix to HBM and reads it back (twice: as
scores for the softmax, as probabilities for P V), so its traffic grows with N^2.
Tiled attention keeps each tile of scores on chip with an online softmax and never
writes the matrix; what it still moves is Q and O once plus K and V once per query
tile. Whether those K/V re-reads cost HBM traffic depends on whether they are still
in L2, so the figure draws both bounds: every re-read from HBM (upper) and every
re-read from L2 (lower: Q, K, V read once, O written once). Times are
max(bytes / bandwidth, FLOPs / FLOP/s) on the chosen GPU.

Controls: sequence length N, query tile size (rows per tile), GPU.
One call: sim.attention.compare_flash_attention.
"""
from __future__ import annotations

import panel as pn
from bokeh.models import ColumnDataSource, Legend, LegendItem

from sim.attention import FlashParams, compare_flash_attention
from widgets.base import (BLUE, CONTROL_WIDTH, GREEN, VERMILION, FigureView, gpu_select, plot, provenance, readout,
                          rows_table, watch)

FIGURE_ID = "ch08-flash"
TITLE = "HBM traffic and time of attention: naive vs tiled (FlashAttention)"
COMPUTE = compare_flash_attention
PARAMS = FlashParams
DEFAULT = FlashParams()
STATES = {  # named states (widgets.state), as the chapter uses them
    "long-sequence": {"seq_len": 131072},
    "small-tile": {"tile": 16}}
SEQ_LENS = [512 * 2 ** k for k in range(9)]          # 512 .. 131,072 tokens
TILES = [16, 32, 64, 128, 256]


def _bytes(b: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= scale:
            return f"{b / scale:,.3g} {unit}"
    return f"{b:,.0f} B"


def _time(s: float) -> str:
    if s >= 1e-3:
        return f"{s * 1e3:,.3g} ms"
    return f"{s * 1e6:,.3g} \u00b5s"


def build() -> FigureView:
    seq = pn.widgets.Select(label="Sequence length N", options={f"{n:,} tokens": n for n in SEQ_LENS},
                            value=DEFAULT.seq_len, width=CONTROL_WIDTH)
    tile = pn.widgets.RadioButtonGroup(options=TILES, value=DEFAULT.tile, width=CONTROL_WIDTH)
    tile_label = pn.pane.HTML("Query tile (rows kept on chip)", width=CONTROL_WIDTH, margin=(6, 10, 0, 10))
    gpu = gpu_select(DEFAULT.gpu)

    cols = {"n": [], "naive": [], "tiled": [], "floor": []}
    bytes_curve, bytes_point = ColumnDataSource(data=dict(cols)), ColumnDataSource(data=dict(cols))
    time_curve, time_point = ColumnDataSource(data=dict(cols)), ColumnDataSource(data=dict(cols))

    p_bytes = plot("HBM bytes, one head", "sequence length N (tokens, log)", "bytes moved (MB, log)",
                   x_type="log", y_type="log", width=290, height=320)
    p_time = plot("Time, one head", "sequence length N (tokens, log)", "time (\u00b5s, log)",
                  x_type="log", y_type="log", width=290, height=320)
    items = []
    for p, curve, point in ((p_bytes, bytes_curve, bytes_point), (p_time, time_curve, time_point)):
        r_naive = p.line("n", "naive", source=curve, line_width=2, color=VERMILION)
        r_tiled = p.line("n", "tiled", source=curve, line_width=2, color=BLUE)
        r_floor = p.line("n", "floor", source=curve, line_width=2, color=GREEN, line_dash="dashed")
        for col, colour in (("naive", VERMILION), ("tiled", BLUE), ("floor", GREEN)):
            p.scatter("n", col, source=point, size=8, color=colour)
        items.append((r_naive, r_tiled, r_floor))
    r_naive, r_tiled, r_floor = items[0]
    p_bytes.add_layout(Legend(items=[LegendItem(label="naive (writes N\u00d7N scores)", renderers=[r_naive]),
                                     LegendItem(label="tiled, K/V re-reads from HBM", renderers=[r_tiled]),
                                     LegendItem(label="tiled, K/V re-reads from L2", renderers=[r_floor])],
                              location="top_left", label_text_font_size="10px", padding=4, spacing=0,
                              background_fill_alpha=0.85), "center")
    numbers, note = readout(), readout(width=860)

    def update() -> None:
        r = compare_flash_attention(FlashParams(gpu=gpu.value, seq_len=seq.value, tile=tile.value))
        grid = r.seq_len_grid
        bytes_curve.data = {"n": grid, "naive": r.naive_bytes / 1e6, "tiled": r.tiled_bytes / 1e6,
                            "floor": r.tiled_min_bytes / 1e6}
        bytes_point.data = {"n": [r.seq_len], "naive": [r.naive_bytes_at / 1e6], "tiled": [r.tiled_bytes_at / 1e6],
                            "floor": [r.tiled_min_bytes_at / 1e6]}
        time_curve.data = {"n": grid, "naive": r.naive_time_s * 1e6, "tiled": r.tiled_time_s * 1e6,
                           "floor": r.tiled_min_time_s * 1e6}
        time_point.data = {"n": [r.seq_len], "naive": [r.naive_time_s_at * 1e6], "tiled": [r.tiled_time_s_at * 1e6],
                           "floor": [r.tiled_min_time_s_at * 1e6]}
        numbers.object = rows_table([
            ("N\u00d7N scores", _bytes(r.score_matrix_bytes_at)),
            ("naive", f"{_bytes(r.naive_bytes_at)}, {_time(r.naive_time_s_at)}"),
            ("tiled, re-reads from HBM", f"{_bytes(r.tiled_bytes_at)}, {_time(r.tiled_time_s_at)}"),
            ("tiled, re-reads from L2",
             f"{_bytes(r.tiled_min_bytes_at)}, {_time(r.tiled_min_time_s_at)}"),
            ("naive / tiled bytes", f"{r.traffic_ratio_at:,.2f}\u00d7 (HBM) to {r.traffic_ratio_min_at:,.0f}\u00d7 (L2)"),
            ("bandwidth assumed", f"{r.bandwidth_bytes_per_s / 1e12:.2f} TB/s"),
        ])
        note.object = provenance(r.note)

    watch([seq, tile, gpu], update)
    update()
    layout = pn.Column(
        pn.Row(pn.Column(seq, tile_label, tile, gpu, numbers, width=CONTROL_WIDTH + 20),
               pn.pane.Bokeh(p_bytes), pn.pane.Bokeh(p_time)),
        note)
    return FigureView(FIGURE_ID, layout, controls={"seq_len": seq, "tile": tile, "gpu": gpu},
                      sources={"bytes_curve": bytes_curve, "bytes_point": bytes_point,
                               "time_curve": time_curve, "time_point": time_point},
                      readouts={"numbers": numbers, "note": note}, plots=[p_bytes, p_time])
