"""ch12-parallel: how many GPUs a model needs, how they are laid out, and what it costs.

Tensor parallelism (TP) slices every weight matrix over the GPUs of one server, so each
reads a share of the bytes and the step gets faster, minus two all-reduces per layer.
Pipeline parallelism (PP) stacks servers layer-wise: it adds room, not speed. Data
parallelism (DP) copies the whole layout: more throughput, the same memory per GPU. For a
mixture-of-experts model, a step reads only the experts its tokens were routed to, and
that number climbs with the tokens in the step.

Controls: model, GPU, weight dtype, users, context per user, data-parallel copies.
One call: sim.parallel.plan_parallel.
Shows: memory per GPU of each candidate layout against what the engine may use, the
decode step of each (compute and communication), and the experts touched per step.
"""
from __future__ import annotations

import panel as pn
from bokeh.models import ColumnDataSource, Span

from sim.parallel import ParallelParams, plan_parallel
from widgets.base import (BLUE, CONTROL_WIDTH, GREY, ORANGE, SKY, VERMILION, FigureView, fmt_gib, fmt_ms, gpu_select,
                          inset_legend, label_ticks, model_select, plot, provenance, readout, rows_table, watch)

FIGURE_ID = "ch12-parallel"
TITLE = "Spreading a model over GPUs: memory per GPU, decode step, experts touched"
COMPUTE = plan_parallel
PARAMS = ParallelParams
STATES = {"405b": {"model": "llama-3.1-405b"}, "mixtral": {"model": "mixtral-8x7b"},
          "h200-fp8": {"gpu": "H200", "dtype": "fp8"}}   # named states (widgets.state)
MODELS = ["llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "mixtral-8x7b"]
CONTEXTS = (1024, 4096, 8192, 32768, 131072)
GiB = 2 ** 30


def _name(layout) -> str:
    return f"TP{layout.tp}" + (f"xPP{layout.pp}" if layout.pp > 1 else "")


def build() -> FigureView:
    d = ParallelParams()
    model = model_select(d.model, names=MODELS)
    gpu = gpu_select(d.gpu)
    dtype = pn.widgets.RadioButtonGroup(options={"bf16": "bf16", "fp8": "fp8", "int4": "int4"},
                                        value=d.weight_dtype, width=CONTROL_WIDTH)
    dtype_label = pn.pane.HTML("Weight dtype", width=CONTROL_WIDTH, margin=(6, 10, 0, 10))
    users = pn.widgets.IntSlider(label="Users (sequences decoding together)", start=1, end=256, value=d.users,
                                 width=CONTROL_WIDTH)
    context = pn.widgets.Select(label="Context per user", options={f"{c:,} tokens": c for c in CONTEXTS},
                                value=d.context_tokens, width=CONTROL_WIDTH)
    copies = pn.widgets.IntSlider(label="Data-parallel copies", start=1, end=8, value=d.data_parallel,
                                  width=CONTROL_WIDTH)

    memory = ColumnDataSource(data={"x": [], "weights": [], "kv": [], "top": [], "fits": []})
    step = ColumnDataSource(data={"x": [], "compute": [], "total": []})
    experts = ColumnDataSource(data={"tokens": [], "touched": []})
    here = ColumnDataSource(data={"tokens": [], "touched": []})
    limit = Span(location=0, dimension="width", line_dash="dashed", line_color="#444", line_width=1.5)

    p_mem = plot("Memory per GPU", "layout", "GiB per GPU", width=320, height=300)
    w = p_mem.vbar(x="x", top="weights", width=0.7, source=memory, color=GREY)
    k = p_mem.vbar(x="x", bottom="weights", top="kv", width=0.7, source=memory, color=BLUE)
    r = p_mem.vbar(x="x", bottom="kv", top="top", width=0.7, source=memory, color=SKY)
    p_mem.add_layout(limit)
    inset_legend(p_mem, [("weights", w), ("KV cache", k), ("reserve", r)])

    p_step = plot("Decode step", "layout", "ms per step", width=320, height=300)
    c = p_step.vbar(x="x", top="compute", width=0.7, source=step, color=ORANGE)
    a = p_step.vbar(x="x", bottom="compute", top="total", width=0.7, source=step, color=VERMILION)
    inset_legend(p_step, [("compute and memory", c), ("communication", a)])

    p_moe = plot("Experts touched per layer", "tokens in the step (log scale)", "distinct experts",
                 x_type="log", width=320, height=300)
    p_moe.line("tokens", "touched", source=experts, line_width=2, color=BLUE)
    p_moe.scatter("tokens", "touched", source=here, size=9, color=ORANGE)
    numbers, note = readout(), readout(width=980)

    def update() -> None:
        res = plan_parallel(ParallelParams(model=model.value, gpu=gpu.value, weight_dtype=dtype.value,
                                           users=users.value, context_tokens=context.value,
                                           data_parallel=copies.value))
        labels = {i: _name(l) for i, l in enumerate(res.candidates)}
        for p in (p_mem, p_step):
            label_ticks(p.xaxis, labels)
        x = list(range(len(res.candidates)))
        wts, kvs = res.candidate_weight_bytes_per_gpu / GiB, res.candidate_kv_bytes_per_gpu / GiB
        memory.data = {"x": x, "weights": wts, "kv": wts + kvs, "top": res.candidate_used_bytes_per_gpu / GiB,
                       "fits": res.candidate_fits}
        limit.location = res.limit_bytes_per_gpu / GiB
        step.data = {"x": x, "compute": (res.candidate_step_time_s - res.candidate_comm_time_s) * 1e3,
                     "total": res.candidate_step_time_s * 1e3}
        experts.data = {"tokens": res.moe_tokens, "touched": res.moe_experts_touched}
        here.data = {"tokens": [users.value], "touched": [res.experts_touched]}
        ch = res.chosen
        rows = [("limit per GPU (dashed)", fmt_gib(res.limit_bytes_per_gpu)),
                ("weights, all", fmt_gib(res.weight_bytes)), ("KV cache, all users", fmt_gib(res.kv_bytes))]
        if ch is None:
            rows += [("layout", "none fits in the GPUs allowed")]
        else:
            rows += [("layout", f"{_name(ch)} x {copies.value} " + ("copy" if copies.value == 1 else "copies")
                      + f" = {res.gpus} GPUs"),
                     ("per GPU: weights + KV + reserve",
                      f"{ch.weight_bytes_per_gpu / GiB:,.1f} + {ch.kv_bytes_per_gpu / GiB:,.1f} + "
                      f"{ch.reserve_bytes_per_gpu / GiB:,.1f} = {fmt_gib(ch.used_bytes_per_gpu)}"),
                     ("decode step", f"{fmt_ms(ch.step_time_s, 2)} ({ch.comm_time_s / ch.step_time_s:.0%} comm.)"),
                     ("per user", f"{ch.tokens_per_s_per_user:,.1f} tokens/s"),
                     ("total, all copies", f"{res.tokens_per_s_total:,.0f} tokens/s")]
        if res.num_experts > 1:
            rows += [("parameters: active / total",
                      f"{res.active_params / 1e9:,.1f} B / {res.total_params / 1e9:,.1f} B"),
                     (f"experts touched at {users.value} tokens", f"{res.experts_touched:.2f} of {res.num_experts}"),
                     (f"EP {res.expert_parallel}: experts per GPU", f"{res.experts_per_gpu:g}, "
                      f"{res.experts_touched_per_gpu:.2f} touched")]
        numbers.object = rows_table(rows)
        note.object = provenance(
            f"{res.model} on {res.gpu}, {dtype.value} weights, bf16 KV cache. Memory in GiB as the driver reports "
            f"it ({fmt_gib(res.device_bytes)} per GPU); the engine may use {d.memory_utilisation:.0%} of it "
            f"(vLLM's default), less an "
            f"assumed {fmt_gib(d.reserve_bytes, 0)} reserve for activations. TP inside a server of "
            f"{d.gpus_per_node} GPUs, PP only across full servers; all-reduces over NVLink (PCIe where the GPU "
            f"has none), stage hand-offs over 400 Gb/s InfiniBand (assumed). {res.routing_note} "
            f"{res.calibration_note}")

    watch([model, gpu, dtype, users, context, copies], update)
    update()
    layout = pn.Column(
        pn.Row(pn.Column(model, gpu, dtype_label, dtype, users, context, copies, width=CONTROL_WIDTH + 20),
               pn.pane.Bokeh(p_mem), pn.pane.Bokeh(p_step)),
        pn.Row(pn.pane.Bokeh(p_moe), numbers), note)
    return FigureView(FIGURE_ID, layout,
                      controls={"model": model, "gpu": gpu, "dtype": dtype, "users": users, "context": context,
                                "copies": copies},
                      sources={"memory": memory, "step": step, "experts": experts, "here": here},
                      readouts={"numbers": numbers, "note": note}, plots=[p_mem, p_step, p_moe])
