"""ch06-kv-size: how big the KV cache gets, next to the weights.

Every layer stores a key and a value vector per KV head for every token a conversation
holds, so the cache grows linearly with context and with the number of conversations:
bytes = 2 x layers x kv_heads x head_dim x tokens x batch x bytes per element. The
weights are fixed, so at some context and batch the cache outweighs the model.

Controls: model, context per conversation, conversations held (batch), KV dtype
(bf16/fp8) and attention type (as the model was trained, MHA, GQA with 8 KV heads,
MQA). One call: sim.kv.kv_size.
Shows: cache size against context (log-log) with the weights as a line, the cache under
MHA/GQA/MQA at the chosen setting, and the numbers (bytes per token, cache, ratio to
weights, conversations at which the cache outweighs the weights).
"""
from __future__ import annotations

import panel as pn
from bokeh.models import ColumnDataSource, FactorRange, Legend, LegendItem

from sim.kv import KVSizeParams, kv_size
from widgets.base import (BLUE, CONTROL_WIDTH, GREY, ORANGE, VERMILION, FigureView, fmt_gib, model_select, plot,
                          provenance, readout, rows_table, watch)

FIGURE_ID = "ch06-kv-size"
TITLE = "KV cache size against context, batch, precision and attention type"
COMPUTE = kv_size
PARAMS = KVSizeParams
STATES = {  # named states (widgets.state), as the chapter uses them
    "mha": {"attention": "mha"},
    "70b-128k": {"model": "llama-3.1-70b", "context": 131072}}
CONTEXTS = (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
ATTENTION = {"as trained": "model", "MHA": "mha", "MQA": "mqa", "GQA-8": "gqa"}   # extremes, then the middle
GB = 1e9
GiB = 2 ** 30


def _size(b: float) -> str:
    return f"{fmt_gib(b, 2)} ({b / GB:,.2f} GB)" if b >= GiB / 100 else f"{b / 2 ** 20:,.1f} MiB"


def build() -> FigureView:
    d = KVSizeParams()
    model = model_select(d.model)
    context = pn.widgets.Select(label="Context per conversation",
                                options={f"{c:,} tokens": c for c in CONTEXTS}, value=d.context_tokens,
                                width=CONTROL_WIDTH)
    batch = pn.widgets.IntSlider(label="Conversations held at once", start=1, end=128, value=d.batch,
                                 width=CONTROL_WIDTH)
    kv_dtype = pn.widgets.RadioButtonGroup(options={"bf16 (2 bytes)": "bf16", "fp8 (1 byte)": "fp8"},
                                           value=d.kv_dtype, width=CONTROL_WIDTH)
    kv_dtype_label = pn.pane.HTML("KV cache dtype", width=CONTROL_WIDTH, margin=(6, 10, 0, 10))
    attention = pn.widgets.RadioButtonGroup(options=ATTENTION, value=d.attention, width=CONTROL_WIDTH)
    attention_label = pn.pane.HTML("Attention type", width=CONTROL_WIDTH, margin=(6, 10, 0, 10))

    curve = ColumnDataSource(data={"context": [], "kv_gb": []})
    point = ColumnDataSource(data={"context": [], "kv_gb": []})
    weights = ColumnDataSource(data={"context": [], "gb": []})
    kinds = ColumnDataSource(data={"kind": [], "gb": [], "colour": []})

    p_ctx = plot("Cache size against context", "context per conversation (tokens, log scale)",
                 "GB (log scale)", x_type="log", y_type="log", width=310, height=300)
    kv_line = p_ctx.line("context", "kv_gb", source=curve, line_width=2, color=BLUE)
    w_line = p_ctx.line("context", "gb", source=weights, line_width=2, color=GREY, line_dash="dashed")
    p_ctx.scatter("context", "kv_gb", source=point, size=9, color=ORANGE)
    p_ctx.add_layout(Legend(items=[LegendItem(label="KV cache", renderers=[kv_line]),
                                   LegendItem(label="weights", renderers=[w_line])],
                            location="top_left", label_text_font_size="11px", background_fill_alpha=0.7), "center")

    p_kind = plot("Cache by attention type", "attention type and KV heads", "GB", width=280, height=300,
                  x_range=FactorRange(factors=[]), x_type="auto")
    p_kind.vbar(x="kind", top="gb", width=0.7, source=kinds, fill_color="colour", line_color=None)
    p_kind.xaxis.major_label_text_font_size = "11px"
    numbers, note = readout(), readout(width=860)

    def update() -> None:
        r = kv_size(KVSizeParams(model=model.value, context_tokens=context.value, batch=batch.value,
                                 kv_dtype=kv_dtype.value, attention=attention.value))
        curve.data = {"context": r.context_grid_tokens, "kv_gb": r.kv_bytes_grid / GB}
        point.data = {"context": [context.value], "kv_gb": [r.kv_bytes / GB]}
        weights.data = {"context": [r.context_grid_tokens[0], r.context_grid_tokens[-1]],
                        "gb": [r.weight_bytes / GB] * 2}
        heads = r.kv_heads_by_attention
        labels = [f"{k.upper()} {h}" for k, h in zip(r.attention_kinds, heads)]
        kinds.data = {"kind": [*labels, "weights"], "gb": [*(r.kv_bytes_by_attention / GB), r.weight_bytes / GB],
                      "colour": [VERMILION if h == r.kv_heads else BLUE for h in heads] + [GREY]}
        p_kind.x_range.factors = [*labels, "weights"]
        numbers.object = rows_table([
            ("KV heads", f"{r.kv_heads} of {r.query_heads} query heads"),
            ("per token", f"{r.bytes_per_token / 1024:,.0f} KiB"),
            ("cache", _size(r.kv_bytes)),
            ("weights", f"{r.weight_bytes / GB:,.1f} GB"),
            ("cache / weights",
             f"{r.kv_over_weights:,.2f}x" if r.kv_over_weights >= 0.1 else f"{r.kv_over_weights:.2g}x"),
            ("cache outweighs the weights from",
             f"{r.batch_where_kv_exceeds_weights:,} conversation{'s' if r.batch_where_kv_exceeds_weights > 1 else ''}"),
        ])
        note.object = provenance(f"{r.note} The highlighted bar is the type selected.")

    watch([model, context, batch, kv_dtype, attention], update)
    update()
    layout = pn.Column(
        pn.Row(pn.Column(model, context, batch, kv_dtype_label, kv_dtype, attention_label, attention, numbers,
                         width=CONTROL_WIDTH + 20),
               pn.pane.Bokeh(p_ctx), pn.pane.Bokeh(p_kind)),
        note)
    return FigureView(FIGURE_ID, layout,
                      controls={"model": model, "context": context, "batch": batch, "kv_dtype": kv_dtype,
                                "attention": attention},
                      sources={"curve": curve, "point": point, "weights": weights, "kinds": kinds},
                      readouts={"numbers": numbers, "note": note}, plots=[p_ctx, p_kind])
