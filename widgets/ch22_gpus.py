"""ch22-gpus: the catalogue's GPUs side by side, and one model on each.

For a model in a format (bf16, fp8, NVFP4), at a context and a prompt length: each GPU's
decode speed for one user, the prefill of the prompt, and the largest batch whose KV cache
fits; and a table of the GPUs' own numbers (dense tensor-core rates by format, memory as
the driver reports it, bandwidth, ridge points, NVLink). Bars in grey are GPUs for which the
guide has no kernel timings: their times are the spec-sheet fallback.

Controls: model, format, context, prompt, KV dtype. One call: sim.gpu_compare.gpu_compare.
"""
from __future__ import annotations

import math

import panel as pn
from bokeh.models import ColumnDataSource, FactorRange

from sim import gpu_compare as gc
from sim import hardware
from widgets.base import (BLUE, CONTROL_WIDTH, GREY, FigureView, model_select, plot, provenance, readout, tokens_label,
                          watch)

FIGURE_ID = "ch22-gpus"
TITLE = "GPUs side by side: what one model does on each"
COMPUTE = gc.gpu_compare
PARAMS = gc.GpuCompareParams
STATES = {  # named states (widgets.state), as the chapter uses them
    "nvfp4": {"weights": "nvfp4"},
    "long-context": {"context": 131072},
    "seventy-b-fp8": {"model": "llama-3.1-70b", "weights": "fp8"},
}
FORMATS = {"bf16": "bf16", "fp8 e4m3 (weights and activations)": "fp8", "NVFP4 (weights and activations)": "nvfp4"}
CONTEXTS = [1024, 4096, 16384, 32768, 131072]
PROMPTS = [512, 4096, 32768]
SHORT = {n: n.replace("-SXM", "").replace("-80GB", "") for n in hardware.names()}
CALIBRATED = ("trace", "carried-over")


def bars(title: str, x_label: str):
    p = plot(title, x_label, "", width=290, height=250, y_range=FactorRange(factors=[SHORT[n] for n in
                                                                                    hardware.names()][::-1]))
    p.x_range.start = 0
    return p


def build() -> FigureView:
    d = PARAMS()
    model = model_select(d.model, names=["llama-3.2-1b", "llama-3.1-8b", "llama-3.1-70b"])
    weights = pn.widgets.Select(label="Format", options=FORMATS, value=d.weights, width=CONTROL_WIDTH)
    context = pn.widgets.Select(label="Context when decoding (tokens)", options={tokens_label(c): c for c in CONTEXTS},
                                value=d.context_tokens, width=CONTROL_WIDTH)
    prompt = pn.widgets.Select(label="Prompt (tokens)", options={tokens_label(c): c for c in PROMPTS},
                               value=d.prompt_tokens, width=CONTROL_WIDTH)
    kv = pn.widgets.Select(label="KV cache", options=["bf16", "fp8"], value=d.kv_dtype, width=CONTROL_WIDTH)

    src = ColumnDataSource(data={"gpu": [], "decode": [], "prefill": [], "batch": [], "colour": [],
                                 "decode_label": [], "prefill_label": [], "batch_label": []})
    plots = []
    for key, title, x_label in (("decode", "Decode, one user (grey: spec sheet)", "tokens/s"),
                                ("prefill", "Prefill of the prompt", "milliseconds"),
                                ("batch", "Largest batch whose KV fits", "sequences at the context")):
        p = bars(title, x_label)
        p.hbar(y="gpu", right=key, height=0.7, source=src, line_color=None,     # a batch is no timing: never grey
               fill_color=BLUE if key == "batch" else "colour")
        p.text(x=key, y="gpu", text=f"{key}_label", source=src, x_offset=3, text_baseline="middle",
               text_font_size="10px")
        plots.append(p)

    table, note = readout(width=880), readout(width=880)

    def update() -> None:
        try:
            r = COMPUTE(PARAMS(model=model.value, weights=weights.value, context_tokens=context.value,
                               prompt_tokens=prompt.value, kv_dtype=kv.value))
        except ValueError as exc:          # a combination the sim refuses: say so, keep the plots as they were
            table.object = f'<p class="fig-warning">Not computed: {exc}.</p>'
            return
        rows = r.rows
        decode = [w.decode_tokens_per_s if w.fits else 0.0 for w in rows]
        prefill = [1e3 * w.prefill_s if w.fits else 0.0 for w in rows]
        src.data = {
            "gpu": [SHORT[w.name] for w in rows],
            "decode": decode, "prefill": prefill, "batch": [w.max_batch for w in rows],
            "colour": [BLUE if w.calibration_source in CALIBRATED else GREY for w in rows],
            "decode_label": [f"{t:,.0f}" if w.fits else "does not fit" for t, w in zip(decode, rows)],
            "prefill_label": [f"{t:,.0f}" if w.fits else "does not fit" for t, w in zip(prefill, rows)],
            "batch_label": [f"{w.max_batch:,}" if w.fits else "does not fit" for w in rows],
        }
        for p, values in zip(plots, (decode, prefill, [w.max_batch for w in rows])):
            p.x_range.end = 1.35 * max(max(values), 1.0)       # room for the labels
        tf = lambda w, f: f"{w.dense_flops[f] / 1e12:,.0f}" if f in w.dense_flops else "-"   # noqa: E731
        body = "".join(
            f"<tr><th>{SHORT[w.name]}</th><td>{tf(w, 'bf16')}</td><td>{tf(w, 'fp8')}</td><td>{tf(w, 'fp4')}</td>"
            f"<td>{w.memory_mib:,}</td><td>{w.bandwidth_bytes_per_s / 1e12:.2f}</td><td>{w.ridge_bf16:,.0f}</td>"
            f"<td>{w.math_dtype} {w.ridge:,.0f}</td>"
            f"<td>{'none' if w.nvlink_bytes_per_s is None else f'{w.nvlink_bytes_per_s / 1e9:,.0f}'}</td></tr>"
            for w in rows)
        table.object = ('<table class="fig-numbers" style="font-size: 0.9em"><tr><th>dense TFLOP/s</th><th>bf16</th><th>fp8</th><th>fp4</th>'
                        "<th>MiB</th><th>TB/s</th><th>ridge, bf16 (FLOP/ byte)</th>"
                        "<th>ridge, this math</th><th>NVLink GB/s</th></tr>"
                        f"{body}</table>")
        calibrated = [SHORT[w.name] for w in rows if w.calibration_source in CALIBRATED]
        fallback = [w for w in rows if w.fits and w.calibration_source not in CALIBRATED]
        assumed = (f"{', '.join(SHORT[w.name] for w in fallback)}, in grey: "
                   f"{fallback[0].calibration_note.split(': ', 1)[-1]}." if fallback else "")
        missing = [SHORT[w.name] for w in rows if not w.fits]
        note.object = provenance(
            f"{r.model}, {r.bits_per_weight:g} bits a weight, {kv.value} KV cache, CUDA graphs. Dense tensor-core "
            f"rates from the datasheets; the sparse rates (2:4) are {gc.SPARSE_FACTOR:g} times these. Memory: "
            f"nvidia-smi's total. A format a GPU has no tensor cores for runs on the next wider ones it has (the "
            f"ridge column names them). Decode and prefill: sim.forward's step time, from kernel timings for "
            f"{', '.join(calibrated) or 'none'}. {assumed} "
            f"Largest batch: vLLM's accounting, 90% of memory less the weights and a 2 GiB reserve, over the KV of "
            f"one sequence at the context (chapter 6)."
            + (f" Does not fit: {', '.join(missing)}." if missing else ""))

    watch([model, weights, context, prompt, kv], update)
    update()
    layout = pn.Column(
        pn.Row(pn.Column(model, weights, context, prompt, kv, width=CONTROL_WIDTH + 20),
               pn.Column(pn.Row(*(pn.pane.Bokeh(p) for p in plots)))),
        table, note)
    return FigureView(FIGURE_ID, layout,
                      controls={"model": model, "weights": weights, "context": context, "prompt": prompt, "kv": kv},
                      sources={"bars": src}, readouts={"table": table, "note": note}, plots=plots)
