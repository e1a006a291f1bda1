"""Roofline model: per-op FLOPs/bytes/time, forward passes, knee, sweeps and figure functions."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim import batching, calibration, decode, forward, hardware, kernel_model, models, ops, roofline
from sim.batch import Batch, Precision

H100 = hardware.get("H100-SXM")
SPEC = kernel_model.spec_sheet(H100)
M8 = models.get("llama-3.1-8b")
LAUNCH = SPEC.launch_overhead_s


def test_op_times_keys_and_default_calibration():
    t = ops.op_times("llama-3.1-8b", "H100-SXM", tokens=1, context_len=512)
    assert {"qkv_proj", "o_proj", "gate_up_proj", "down_proj", "attention"} <= set(t)
    assert all(v > 0 for v in t.values())
    shipped = calibration.for_gpu(H100)
    assert t == ops.op_times("llama-3.1-8b", H100, 1, 512, calibration=shipped)


def test_op_times_of_moe_model_has_router():
    t = ops.op_times("mixtral-8x7b", "H100-SXM", tokens=16)
    assert {"router", "gate_up_proj", "down_proj", "attention"} <= set(t)


def test_gemm_flops_and_bytes_follow_the_shapes():
    T = 37
    by_name = {o.name: o for o in ops.layer_ops(M8, H100, Batch.prefill(T), calibration=SPEC)}
    for name, (k, n) in M8.linear_shapes().items():
        o = by_name[name]
        assert o.flops == 2 * T * n * k
        assert o.weight_bytes == 2 * k * n
        assert o.act_bytes == 2 * (T * k + T * n)


def test_op_time_is_launch_plus_roofline_max():
    by_name = {o.name: o for o in ops.layer_ops(M8, H100, Batch.decode(1, 100), calibration=SPEC)}
    o = by_name["gate_up_proj"]
    expected = LAUNCH + max(o.nbytes / (0.8 * 3.35e12), o.flops / (0.6 * 989e12))
    assert o.time_s == pytest.approx(expected, rel=1e-12)
    assert o.bound == "memory"


def test_attention_counts_causal_pairs_and_kv_reads():
    by_name = {o.name: o for o in ops.layer_ops(M8, H100, Batch((4,), (10,)), calibration=SPEC)}
    a = by_name["attention"]
    pairs = 4 * 10 + 4 * 5 // 2                        # each of 4 new tokens sees 10 cached + itself and earlier new
    assert a.flops == 4 * 32 * 128 * pairs
    kv_row = 2 * 8 * 128 * 2
    assert a.kv_bytes == kv_row * (14 + 4)             # read 10 cached + 4 new, write 4 new
    assert a.act_bytes == 2 * 2 * 4 * 32 * 128          # read Q, write O


def test_embedding_table_is_gathered_not_read():
    f = forward.decode_step(M8, H100, 1, 0, calibration=SPEC)
    embed = next(o for o in f.ops if o.name == "embed")
    assert embed.weight_bytes == 2 * 4096              # one row
    head = next(o for o in f.ops if o.name == "lm_head")
    assert head.weight_bytes == 2 * 4096 * 128256       # the head reads all of it


def test_forward_weight_bytes_are_all_but_the_embedding_table():
    f = forward.decode_step(M8, H100, 1, 0, calibration=SPEC)
    b = models.parameter_breakdown(M8)
    expected = 2 * (b.total - b.embedding + M8.hidden_size)
    assert f.weight_bytes == pytest.approx(expected)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 300), st.integers(0, 5000)), min_size=1, max_size=12),
       st.booleans())
def test_step_cost_equals_forward_pass(seqs, graphs):
    new = tuple(n for n, _ in seqs)
    ctx = tuple(c for _, c in seqs)
    cost = forward.StepCost(M8, H100, calibration=SPEC, cuda_graphs=graphs)
    f = forward.forward_pass(M8, H100, Batch(new, ctx), calibration=SPEC, cuda_graphs=graphs)
    assert cost.time_s(new, ctx) == pytest.approx(f.time_s, rel=1e-12)
    assert f.time_s == pytest.approx(f.op_busy_time_s.sum() + f.launch_overhead_s, rel=1e-12)


def test_uniform_and_primed_costs_agree():
    cost = forward.StepCost(M8, H100, calibration=SPEC)
    fresh = forward.StepCost(M8, H100, calibration=SPEC)
    cost.prime(tokens=[3, 12, 400], logits=[3, 4])
    assert cost.uniform_time_s(4, 3, 50) == pytest.approx(fresh.time_s([3] * 4, [50] * 4), rel=1e-12)
    assert cost.uniform_time_s(3, 4, 7, logits_seqs=0) == pytest.approx(
        fresh.time_s([4] * 3, [7] * 3, logits_seqs=0), rel=1e-12)


def _event_loop(busy: list, d: float) -> float:
    """Kernel i is issued by the host at (i + 1) d and starts when issued and its predecessor is done."""
    end = 0.0
    for i, b in enumerate(busy):
        end = max((i + 1) * d, end) + b
    return end


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 40e-6), max_size=3), st.lists(st.floats(0, 40e-6), min_size=1, max_size=9),
       st.lists(st.floats(0, 40e-6), max_size=3), st.integers(1, 40), st.floats(1e-6, 20e-6))
def test_eager_step_is_the_launch_queue(pre, layer, post, layers, d):
    # the closed-form shortcut over repeated layers gives exactly the kernel-by-kernel queue
    t = forward.eager_step_time_s(pre, layer, post, layers, d)
    busy = pre + layer * layers + post
    assert t == pytest.approx(_event_loop(busy, d), rel=1e-9, abs=1e-15)
    # launches are asynchronous: never less than the host's issue time or d + the GPU's work, never their sum
    assert max(len(busy) * d, d + sum(busy)) - 1e-15 <= t <= len(busy) * d + sum(busy) + 1e-15
    # plain numbers take the scalar path; as one-element arrays, the vectorised one: the same bits
    one = lambda xs: [np.array([x]) for x in xs]   # noqa: E731
    assert isinstance(t, float)
    assert t == forward.eager_step_time_s(one(pre), one(layer), one(post), layers, d)[0]


def test_eager_step_is_vectorised_over_step_sizes():
    layer = [np.array([50e-6, 1e-6]), np.array([2e-6, 2e-6])]
    t = forward.eager_step_time_s([], layer, [], layers=20, dispatch_s=10e-6)
    assert t.tolist() == pytest.approx([_event_loop([50e-6, 2e-6] * 20, 10e-6), _event_loop([1e-6, 2e-6] * 20, 10e-6)])


def test_cuda_graphs_matter_only_where_the_host_is_slower_than_the_gpu():
    d = forward.HOST_DISPATCH_S_PER_KERNEL
    b = Batch.decode(1, 1024)
    eager = forward.forward_pass(M8, H100, b, calibration=SPEC, cuda_graphs=False)
    graph = forward.forward_pass(M8, H100, b, calibration=SPEC, cuda_graphs=True)
    assert eager.kernels == 32 * 9 + 4                  # 9 kernels per layer + embed, norm, head, sampler
    assert graph.time_s == pytest.approx(graph.op_busy_time_s.sum() + LAUNCH)
    # Llama 3.1 8B: the host's 2.9 ms of dispatch hides behind 5.7 ms of kernels; not the sum of the two
    assert eager.host_dispatch_s == pytest.approx(292 * d)
    assert eager.time_s < graph.time_s + 0.1e-3 < eager.host_dispatch_s + graph.time_s
    # Llama 3.2 1B: its kernels are shorter than the dispatch, the GPU waits and graphs pay off
    e1 = forward.forward_pass("llama-3.2-1b", H100, b, calibration=SPEC, cuda_graphs=False)
    g1 = forward.forward_pass("llama-3.2-1b", H100, b, calibration=SPEC, cuda_graphs=True)
    assert e1.time_s >= e1.host_dispatch_s and e1.time_s > 1.5 * g1.time_s


def test_prefill_compute_bound_decode_memory_bound():
    assert forward.prefill_pass(M8, H100, 4096, calibration=SPEC).bound == "compute"
    assert forward.decode_step(M8, H100, 1, 4096, calibration=SPEC).bound == "memory"


def test_decode_attention_intensity_does_not_move_with_batch():
    a1 = next(o for o in ops.layer_ops(M8, H100, Batch.decode(1, 4096), calibration=SPEC) if o.name == "attention")
    a64 = next(o for o in ops.layer_ops(M8, H100, Batch.decode(64, 4096), calibration=SPEC)
               if o.name == "attention")
    assert a64.intensity_flop_per_byte == pytest.approx(a1.intensity_flop_per_byte, rel=1e-3)
    # ~2 x query heads / (KV heads x KV bytes) = 4 FLOP/B for Llama 3.1 8B in bf16
    assert a1.intensity_flop_per_byte == pytest.approx(4.0, rel=0.01)


def test_decode_gemm_intensity_grows_with_batch():
    def qkv(b):
        return next(o for o in ops.layer_ops(M8, H100, Batch.decode(b, 10), calibration=SPEC)
                    if o.name == "qkv_proj").intensity_flop_per_byte
    assert qkv(1) == pytest.approx(1.0, rel=0.01)
    assert qkv(64) == pytest.approx(64.0, rel=0.05)


def test_weight_only_int4_reads_a_quarter_and_keeps_bf16_math():
    p = Precision(weight_dtype="int4")
    assert p.math_dtype == "bf16"
    f16 = forward.decode_step(M8, H100, 1, 0, calibration=SPEC)
    f4 = forward.decode_step(M8, H100, 1, 0, precision=p, calibration=SPEC)
    lin16 = sum(o.weight_bytes * o.count for o in f16.ops if o.kind == "gemm" and o.name != "lm_head")
    lin4 = sum(o.weight_bytes * o.count for o in f4.ops if o.kind == "gemm" and o.name != "lm_head")
    assert lin4 == lin16 / 4
    assert Precision(weight_dtype="fp8", act_dtype="fp8").math_dtype == "fp8"


def test_fp8_on_a100_is_refused_with_the_valid_dtypes():
    with pytest.raises(ValueError, match="valid dtypes"):
        forward.decode_step(M8, "A100-80GB", 1, 0, precision=Precision(weight_dtype="fp8", act_dtype="fp8"))


def test_moe_step_reads_more_weights_as_the_batch_grows():
    mix = models.get("mixtral-8x7b")
    w = [forward.decode_step(mix, H100, b, 100, calibration=SPEC).weight_bytes for b in (1, 2, 8, 64)]
    assert w[0] < w[1] < w[2] < w[3]
    b = models.parameter_breakdown(mix)
    # one token touches 2 of 8 experts: about the active parameters (minus the embedding table)
    assert w[0] == pytest.approx(2 * (b.active - b.embedding), rel=0.01)
    assert w[3] == pytest.approx(2 * (b.total - b.embedding), rel=0.01)
    assert ops.expected_experts_touched(8, 2, 1) == 2.0


def test_batch_knee_matches_the_closed_form():
    shapes = M8.linear_shapes().values()
    P = M8.num_layers * sum(k * n for k, n in shapes) + M8.vocab_size * M8.hidden_size
    S = M8.num_layers * sum(k + n for k, n in shapes) + M8.vocab_size + M8.hidden_size
    F, BW = SPEC.flops("bf16"), SPEC.bandwidth_bytes_per_s
    closed = (2 * P / BW) / (2 * P / F - 2 * S / BW)
    assert batching.batch_knee(M8, H100, calibration=SPEC) == pytest.approx(closed, rel=1e-6)
    # near the (effective) ridge point: 0.75 x 295 = 221
    assert 0.9 < closed / roofline.effective_ridge_point(H100, calibration=SPEC) < 1.2


def test_sweep_batch_shape_of_the_curves():
    r = batching.sweep_batch(batching.BatchSweepParams(context_tokens=128, batch=64), calibration=SPEC)
    assert np.all(np.diff(r.step_time_s) > 0)
    assert np.all(np.diff(r.tokens_per_s_per_user) < 0)
    assert np.all(np.diff(r.tokens_per_s_total) > 0)
    i8 = list(r.batch_grid).index(8)
    assert r.step_time_s[i8] < 1.1 * r.step_time_s[0]           # flat well below the knee
    assert r.step_time_s[-1] > 3 * r.step_time_s[0]               # and climbing well above it
    first = r.batch_grid[np.argmax(r.gemm_compute_bound)]
    assert r.gemm_compute_bound[-1] and not r.gemm_compute_bound[0]
    assert first >= r.knee_batch and r.batch_grid[np.argmax(r.gemm_compute_bound) - 1] < r.knee_batch
    assert r.step_time_s_at_batch == r.step_time_s[list(r.batch_grid).index(64)]
    assert r.ridge_flop_per_byte == pytest.approx(295.2, abs=0.1)


def test_sweep_batch_matches_forward_pass_at_every_point():
    r = batching.sweep_batch(batching.BatchSweepParams(max_batch=64, grid_points=8), calibration=SPEC)
    for b, t in zip(r.batch_grid, r.step_time_s):
        f = forward.decode_step(M8, H100, int(b), 256, calibration=SPEC, cuda_graphs=True)
        assert t == pytest.approx(f.time_s, rel=1e-12)


def test_decode_meter_kv_bytes_grow_by_one_token_per_step():
    r = decode.decode_meter(decode.DecodeMeterParams(batch=4, steps=10), calibration=SPEC)
    per_token = 2 * 32 * 8 * 128 * 2
    assert np.allclose(np.diff(r.kv_bytes_per_step), 4 * per_token)
    assert np.all(np.diff(r.weight_bytes_per_step) == 0)
    assert np.all(np.diff(r.step_time_s) >= 0)
    assert r.tokens_generated[-1] == 40
    f = forward.decode_step(M8, H100, 4, 512 + 9, calibration=SPEC)
    assert r.bytes_per_step[-1] == pytest.approx(f.bytes) and r.step_time_s[-1] == pytest.approx(f.time_s)


def test_phase_times_add_up():
    p = decode.PhaseParams(prompt_tokens=500, output_tokens=40)
    r = decode.phase_times(p, calibration=SPEC)
    pre = forward.prefill_pass(M8, H100, 500, calibration=SPEC)
    assert r.prefill_time_s == pytest.approx(pre.time_s)
    steps = [forward.decode_step(M8, H100, 1, 500 + i, calibration=SPEC).time_s for i in range(39)]
    assert r.decode_step_time_s == pytest.approx(steps)
    assert r.total_time_s == pytest.approx(pre.time_s + sum(steps))


def test_decode_times_interpolation_is_close_for_long_runs():
    cost = forward.StepCost(M8, H100, calibration=SPEC, cuda_graphs=True)
    ctx = np.arange(1000, 3000)
    approx = cost.decode_times_s(1, ctx)
    exact = np.array([cost.uniform_time_s(1, 1, int(c)) for c in ctx[::97]])
    assert approx[::97] == pytest.approx(exact, rel=1e-6)


def test_roofline_chart_places_the_ops():
    r = roofline.roofline_chart(roofline.RooflineChartParams(batch=64), calibration=SPEC)
    assert r.ridge_flop_per_byte == pytest.approx(295.2, abs=0.1)
    assert r.effective_ridge_flop_per_byte == pytest.approx(0.75 * 295.2, abs=0.1)
    groups = set(r.op_groups)
    assert groups == {"prefill GEMM", "decode GEMM, batch 1", "decode GEMM, batch B", "attention (decode)",
                      "elementwise"}
    inten = dict(zip(r.op_labels, r.op_intensity_flop_per_byte))
    assert inten["qkv_proj, decode, batch 64"] > 50 * inten["qkv_proj, decode, batch 1"]
    assert inten["qkv_proj, prefill 2048"] > r.ridge_flop_per_byte
    elem = [i for g, i in zip(r.op_groups, r.op_intensity_flop_per_byte) if g == "elementwise"]
    assert max(elem) < 2
    assert np.all(r.op_achieved_flops_per_s <= r.op_attainable_flops_per_s * (1 + 1e-9))
    assert r.peak_flops_per_s[-1] == 989e12 and r.peak_flops_per_s[0] == pytest.approx(0.1 * 3.35e12)


@pytest.mark.parametrize("call, match", [
    (lambda: ops.op_times("llama-3.1-8b", "H100-SXM", tokens=-1), "tokens must be >= 1"),
    (lambda: ops.op_times("llama-3.1-8b", "H100-SXM", tokens=10, seqs=3), "split evenly"),
    (lambda: ops.op_times("llama-3.1-8b", "H100-SXM", tokens=1, context_len=-5), "context_len must be >= 0"),
    (lambda: ops.op_times("llama-9", "H100-SXM", 1), "valid names: llama-3.1-8b"),
    (lambda: ops.op_times("llama-3.1-8b", "TPU", 1), "valid names: H100-SXM"),
    (lambda: Batch((1, 2), (0,)), "new_tokens has 2 entries"),
    (lambda: Batch((0,), (0,)), "new_tokens must be >= 1"),
    (lambda: Batch((1,) * 999 + (0,), (5,) * 1000), "new_tokens must be >= 1, got 0"),
    (lambda: Batch((1, 2), (4, -3)), "context_tokens must be >= 0, got -3"),
    (lambda: Batch((1, 2.5), (0, 0)), "new_tokens must be an integer, got 2.5"),
    (lambda: Batch((1, True), (0, 0)), "new_tokens must be an integer, got True"),
    (lambda: Batch((1,), (float("nan"),)), "context_tokens must be an integer, got nan"),
    (lambda: Precision(weight_dtype="int3"), "valid dtypes: fp32, bf16"),
    (lambda: roofline.ridge_point("H100-SXM", "fp4"), "valid dtypes"),
    (lambda: batching.BatchSweepParams(batch=2000), "batch must be <= 1024"),
    (lambda: decode.DecodeMeterParams(batch=0), "batch must be >= 1"),
])
def test_bad_input_raises_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_batch_holds_its_token_counts_as_ints():
    import numpy as np
    b = Batch((1, 2.0, np.int64(3)), [0, 7.0, np.int32(9)])
    assert b.new_tokens == (1, 2, 3) and b.context_tokens == (0, 7, 9)
    assert all(type(n) is int for n in b.new_tokens + b.context_tokens)
    d = Batch.decode(1024, 4096)
    assert d.new_tokens == (1,) * 1024 and d.context_tokens == (4096,) * 1024 and d.tokens == 1024


def test_layer_ops_of_a_one_layer_model_leave_out_model_level_ops():
    from dataclasses import replace
    one = replace(M8, num_layers=1)
    names = [o.name for o in ops.layer_ops(one, H100, Batch.decode(2, 10), calibration=SPEC)]
    assert "lm_head" not in names and "embed" not in names and len(names) == 9


def test_attention_share_of_prefill_matches_the_forward_pass():
    share = forward.attention_share_of_prefill(M8, H100, [512, 4096, 32768], calibration=SPEC)
    for n, s in zip([512, 4096, 32768], share):
        f = forward.prefill_pass(M8, H100, n, calibration=SPEC)
        assert s == pytest.approx(f.busy_time_by_kind_s()["attention"] / f.time_s, rel=1e-12)
    assert share[0] < share[1] < share[2]
    with pytest.raises(ValueError, match="lengths >= 1"):
        forward.attention_share_of_prefill(M8, H100, [0])


@pytest.mark.parametrize("model, batch", [(M8, 1), (M8, 64), ("mixtral-8x7b", 3)])
def test_decode_meter_without_a_cache_recomputes_the_prefix(model, batch):
    p = decode.DecodeMeterParams(model=model, batch=batch, kv_cache=False, steps=8)
    r = decode.decode_meter(p, calibration=SPEC)
    for i in (0, 7):
        n = p.prompt_tokens + i + 1               # the whole prefix, newest token included
        f = forward.forward_pass(model, H100, Batch((n,) * batch, (0,) * batch, logits_seqs=batch),
                                  calibration=SPEC, cuda_graphs=True)
        assert r.step_time_s[i] == pytest.approx(f.time_s, rel=1e-12)
        assert (r.flops_per_step[i], r.bytes_per_step[i]) == pytest.approx((f.flops, f.bytes), rel=1e-12)


def test_without_a_cache_the_counter_runs_away():
    kept = decode.decode_meter(decode.DecodeMeterParams(steps=256), calibration=SPEC)
    none = decode.decode_meter(decode.DecodeMeterParams(steps=256, kv_cache=False), calibration=SPEC)
    # with the cache a step does ~15 GFLOP; without it, the whole 512+ token prefix again: compute-bound
    assert none.flops_per_step[0] > 400 * kept.flops_per_step[0]     # 513 tokens, but one row of logits
    assert none.compute_floor_s[0] > none.memory_floor_s[0] and kept.compute_floor_s[0] < kept.memory_floor_s[0]
    # every step costs more than the last, and the total grows faster than the number of steps
    assert np.all(np.diff(none.step_time_s) > 0)
    assert none.step_time_s[-1] > 1.3 * none.step_time_s[0]
    assert none.cumulative_time_s[-1] > 2 * kept.cumulative_time_s[-1]


# ---- what the figures print comes with their one sim call ---------------------------------

def test_figure_results_carry_their_labels():
    meter = decode.decode_meter(decode.DecodeMeterParams(model="llama-3.1-70b", gpu="L40S"), calibration=SPEC)
    assert (meter.model, meter.memory_bytes, meter.memory_label) == ("Llama 3.1 70B", 46_068 * 2 ** 20, "48 GB")
    ph = decode.phase_times(decode.PhaseParams(gpu="H200"))
    assert ph.ridge_flop_per_byte == pytest.approx(989e12 / 4.8e12)          # H200: H100 compute, 4.8 TB/s
    assert ph.calibration_note == calibration.for_gpu(hardware.get("H200")).note
    assert (ph.model, ph.gpu) == ("Llama 3.1 8B", "NVIDIA H200 SXM 141GB")


def test_roofline_chart_carries_the_gpus_own_measured_kernels():
    own = calibration.own_recorded_device(H100)
    r = roofline.roofline_chart(roofline.RooflineChartParams(gpu="H100-SXM", dtype="bf16"))
    # the imported H100 timings are fp16, which stand for bf16 (same tensor-core rate)
    assert r.measured is not None and r.measured.device == own.name and r.measured.dtype in own.calibration.flops_per_s
    assert r.no_measured_reason == "" and "NVIDIA H100 SXM5 80GB" in r.measured_on
    none = roofline.roofline_chart(roofline.RooflineChartParams(gpu="B200"))
    assert none.measured is None and none.no_measured_reason == "no kernel timings of this GPU"
    fp8 = roofline.roofline_chart(roofline.RooflineChartParams(gpu="H100-SXM", dtype="fp8"))
    assert fp8.measured is None and fp8.no_measured_reason == "its timings have no fp8 kernels"


def test_batch_sweep_carries_one_layers_measured_gemms():
    own = batching.sweep_batch(batching.BatchSweepParams(gpu="A100-80GB", batch=8, max_batch=8))
    a100 = calibration.own_recorded_device(hardware.get("A100-80GB"))
    assert own.measured.device == a100.name and "not A100-80GB numbers" not in own.measured_note
    m = batching.layer_gemm_measurements(a100, own.measured.model)
    assert own.measured.measured_s.tolist() == m.measured_s.tolist()
    other = batching.sweep_batch(batching.BatchSweepParams(gpu="B200", model="gemma-7b", batch=8, max_batch=8))
    assert other.measured.device != "NVIDIA B200" and "they are not B200 numbers" in other.measured_note
