"""TTFT, TPOT, E2E, attention share, goodput."""
from __future__ import annotations

import numpy as np
import pytest

from sim import forward, hardware, kernel_model, latency, scheduler

SPEC = kernel_model.spec_sheet(hardware.get("H100-SXM"))


@pytest.mark.parametrize("preset", list(latency.PRESETS))
def test_presets_follow_the_definitions(preset):
    r = latency.estimate_latency(latency.LatencyParams(preset=preset), calibration=SPEC)
    w = latency.PRESETS[preset]
    assert (r.prompt_tokens, r.output_tokens) == (w.prompt_tokens, w.output_tokens)
    pre = forward.prefill_pass("llama-3.1-8b", "H100-SXM", w.prompt_tokens, calibration=SPEC)
    assert r.ttft_s == pytest.approx(pre.time_s)                       # TTFT = prefill (alone on the GPU)
    assert len(r.itl_s) == w.output_tokens - 1
    assert r.e2e_s == pytest.approx(r.ttft_s + r.itl_s.sum())
    assert r.tpot_s == pytest.approx(latency.tpot_from_e2e(r.e2e_s, r.ttft_s, r.output_tokens))
    assert r.e2e_s == pytest.approx(r.ttft_s + (r.output_tokens - 1) * r.tpot_s)


def test_presets_differ_where_they_should():
    chat, summ, essay = (latency.estimate_latency(latency.LatencyParams(preset=k), calibration=SPEC)
                         for k in ("chat", "summarise", "essay"))
    assert summ.ttft_s > 10 * chat.ttft_s                  # long prompt: slow first token
    assert essay.e2e_s > 5 * chat.e2e_s                    # long answer: long total
    assert essay.tpot_s == pytest.approx(chat.tpot_s, rel=0.05)   # streaming speed barely depends on the prompt


def test_overrides_and_slo():
    r = latency.estimate_latency(latency.LatencyParams(prompt_tokens=64, output_tokens=1), calibration=SPEC)
    assert np.isnan(r.tpot_s) and r.e2e_s == r.ttft_s and len(r.itl_s) == 0
    assert r.meets_slo                                     # 8B on an H100 is far inside MLPerf's 70B limits
    slow = latency.estimate_latency(latency.LatencyParams(model="llama-3.1-70b", gpu="H200", preset="summarise"),
                                    calibration=None)
    assert not slow.meets_slo                              # 16K-token prompt on one GPU misses 450 ms


def test_attention_share_grows_roughly_with_prompt_length():
    r = latency.estimate_latency(calibration=SPEC)
    share = r.attention_share_grid
    assert np.all(np.diff(share[share > 0.01]) > 0)
    assert share[-1] > 0.5 and share[0] < 0.01
    # attention FLOPs grow with N^2 and GEMM FLOPs with N: the attention/GEMM time ratio doubles when N doubles
    n = r.prompt_grid_tokens
    ratio = share / (1 - share)
    big = n >= 8192
    slope = np.polyfit(np.log(n[big]), np.log(ratio[big]), 1)[0]
    assert slope == pytest.approx(1.0, abs=0.15)


def test_concurrent_users_slow_decode_a_little():
    one = latency.estimate_latency(latency.LatencyParams(concurrent_users=1), calibration=SPEC)
    many = latency.estimate_latency(latency.LatencyParams(concurrent_users=32), calibration=SPEC)
    assert one.tpot_s < many.tpot_s < 3 * one.tpot_s


def test_serving_metrics_goodput():
    m = latency.serving_metrics(np.array([0.1, 0.2, 0.9, 0.3]), np.array([0.02, 0.05, 0.01, np.nan]),
                                np.array([100, 100, 100, 1]), makespan_s=10.0)
    assert m.slo_attainment == 0.5                          # #1 ok, #2 TPOT too slow, #3 TTFT too slow, #4 ok
    assert m.slo_met_requests_per_s == pytest.approx(0.2)
    assert m.throughput_tokens_per_s == pytest.approx(30.1)
    assert m.tpot_p50_s == pytest.approx(0.02)


def test_measure_schedule_uses_the_run():
    r = scheduler.simulate_schedule(scheduler.SchedulerParams(), calibration=SPEC)
    m = latency.measure_schedule(r)
    assert m.requests == len(r.requests)
    assert m.throughput_tokens_per_s == pytest.approx(r.throughput_tokens_per_s)
    assert 0 <= m.slo_attainment <= 1


@pytest.mark.parametrize("call, match", [
    (lambda: latency.tpot_from_e2e(1.0, 0.5, 1), "output_tokens must be >= 2"),
    (lambda: latency.tpot_from_e2e(0.1, 0.5, 10), "must be >= ttft_s"),
    (lambda: latency.LatencyParams(preset="poem"), "valid presets: chat, summarise, essay"),
    (lambda: latency.LatencyParams(prompt_tokens=0), "prompt_tokens must be >= 1"),
    (lambda: latency.SLO("x", ttft_s=-1, tpot_s=0.1), "ttft_s must be > 0"),
    (lambda: latency.serving_metrics(np.array([1.0]), np.array([1.0, 2.0]), np.array([1]), 1.0), "same"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_tpot_grows_with_context_once_the_cache_rivals_the_weights():
    """One user, 8B on an H100: each decode step reads the weights and the whole cache, so TPOT rises
    by (extra cache bytes) / (effective bandwidth), and at 128K the cache outweighs the weights."""
    short = latency.estimate_latency(latency.LatencyParams(prompt_tokens=1000, output_tokens=2), calibration=SPEC)
    long = latency.estimate_latency(latency.LatencyParams(prompt_tokens=128_000, output_tokens=2), calibration=SPEC)
    per_token = 2 * 32 * 8 * 128 * 2                     # K and V, 32 layers, 8 KV heads of 128, bf16
    bandwidth = 0.8 * 3.35e12                            # spec-sheet calibration: 80% of HBM3's 3.35 TB/s
    assert long.tpot_s - short.tpot_s == pytest.approx((128_000 - 1000) * per_token / bandwidth, rel=0.02)
    assert short.tpot_s == pytest.approx(5.7e-3, abs=0.1e-3) and long.tpot_s == pytest.approx(11.9e-3, abs=0.1e-3)
    step = forward.decode_step("llama-3.1-8b", "H100-SXM", 1, 128_000, calibration=SPEC)
    assert step.kv_bytes > step.weight_bytes
    ctx = [1000, 8000, 32_000, 64_000, 128_000]
    tpots = [latency.estimate_latency(latency.LatencyParams(prompt_tokens=c, output_tokens=2),
                                      calibration=SPEC).tpot_s for c in ctx]
    assert np.all(np.diff(tpots) > 0)


def test_ttft_levers_each_change_one_thing():
    t = latency.ttft_levers(calibration=SPEC)
    cost = forward.StepCost("llama-3.1-8b", "H100-SXM", calibration=SPEC, cuda_graphs=False)
    assert t.baseline_s == pytest.approx(cost.time_s([16_000], [0]))
    # chunking makes this prompt's own first token later: every chunk re-reads the earlier chunks' cache
    assert t.chunked_s == pytest.approx(latency.chunked_prompt_s("llama-3.1-8b", "H100-SXM", 16_000, 512,
                                                                    calibration=SPEC))
    assert t.chunked_s > t.baseline_s
    # a cached prefix: only the last 1,000 tokens are computed, attending to the 15,000 cached ones
    assert t.prefix_cached_s == pytest.approx(cost.time_s([1000], [15_000]))
    assert t.prefix_cached_s < t.baseline_s / 10
    # fp8 GEMMs run at twice bf16's tensor rate and fp8 activations halve the elementwise bytes;
    # attention stays bf16, so the saving is half of the rest
    busy = forward.prefill_pass("llama-3.1-8b", "H100-SXM", 16_000, calibration=SPEC).busy_time_by_kind_s()
    assert t.baseline_s - t.fp8_s == pytest.approx((busy["gemm"] + busy["elementwise"]) / 2, rel=0.01)
    # four GPUs: less than 4x faster (all-reduces, replicated elementwise work), more than 2x
    assert t.baseline_s / 4 < t.tensor_parallel_s < t.baseline_s / 2
    # B200's 2.25 PFLOP/s dense bf16 against H100's 989 TFLOP/s: a compute-bound prefill speeds up ~2.3x
    assert t.baseline_s / t.faster_gpu_s == pytest.approx(2250 / 989, rel=0.1)


def test_ttft_levers_reject_a_cache_longer_than_the_prompt():
    with pytest.raises(ValueError, match="cached_prefix_tokens"):
        latency.ttft_levers(cached_prefix_tokens=16_000)


def test_loaded_server_percentiles_and_histograms():
    r = latency.simulate_load(latency.LoadParams(), calibration=SPEC)
    assert r.metrics.ttft_p50_s == pytest.approx(np.percentile(r.ttft_s, 50))
    assert r.metrics.ttft_p99_s == pytest.approx(np.percentile(r.ttft_s, 99))
    assert r.ttft_counts.sum() == 60 and r.tpot_counts.sum() == np.isfinite(r.tpot_s).sum()
    assert r.metrics.slo_attainment == pytest.approx(r.meets_slo.mean())
    slo = latency.MLPERF_V50_LLAMA2_70B_INTERACTIVE
    assert r.ttft_misses == (r.ttft_s > slo.ttft_s).sum() and r.tpot_misses == (r.tpot_s > slo.tpot_s).sum()
    assert max(r.ttft_misses, r.tpot_misses) <= (~r.meets_slo).sum() <= r.ttft_misses + r.tpot_misses
    again = latency.simulate_load(latency.LoadParams(), calibration=SPEC)
    assert np.array_equal(r.ttft_s, again.ttft_s)                        # seeded: the same run every time
    # an idle-ish server: first tokens are about one prefill; a busy one queues, so the tail grows
    quiet = latency.simulate_load(latency.LoadParams(rate_per_s=2), calibration=SPEC)
    busy = latency.simulate_load(latency.LoadParams(rate_per_s=40), calibration=SPEC)
    assert quiet.metrics.ttft_p99_s < latency.MLPERF_V50_LLAMA2_70B_INTERACTIVE.ttft_s < busy.metrics.ttft_p99_s
    assert busy.metrics.slo_attainment < 0.5 < 0.99 < quiet.metrics.slo_attainment + 0.01


def test_chunk_budget_moves_which_limit_breaks_first():
    """Whole prompts stall the running decodes (TPOT misses); small chunks queue the prompts (TTFT misses)."""
    whole = latency.simulate_load(latency.LoadParams(chunked_prefill=False), calibration=SPEC)
    small = latency.simulate_load(latency.LoadParams(token_budget=512), calibration=SPEC)
    assert whole.tpot_misses > whole.ttft_misses and small.ttft_misses > small.tpot_misses == 0
    assert small.metrics.tpot_p99_s < whole.metrics.tpot_p99_s and small.metrics.ttft_p50_s > whole.metrics.ttft_p50_s


def test_goodput_is_distserves_highest_rate_meeting_the_target():
    p = latency.LoadParams()
    g = latency.goodput(p, rates_per_s=(4, 8, 12, 16, 20, 24, 28), calibration=SPEC)
    i = list(g.rates_per_s).index(g.goodput_per_s)
    assert np.all(g.attainment[: i + 1] >= 0.9) and g.attainment[i + 1] < 0.9
    for rate, att in zip(g.rates_per_s, g.attainment):
        run = latency.simulate_load(latency.LoadParams(rate_per_s=float(rate)), calibration=SPEC)
        assert att == run.metrics.slo_attainment
    none = latency.goodput(latency.LoadParams(slo=latency.SLO("tight", 1e-4, 1e-4)), rates_per_s=(4,),
                           calibration=SPEC)
    assert none.goodput_per_s == 0.0


def test_load_params_reject_bad_input():
    with pytest.raises(ValueError, match="rate_per_s"):
        latency.LoadParams(rate_per_s=0)
    with pytest.raises(ValueError, match="target_attainment"):
        latency.LoadParams(target_attainment=1.5)
    with pytest.raises(ValueError, match="prompt_tokens_max"):
        latency.LoadParams(prompt_tokens_min=500, prompt_tokens_max=100)


def test_results_carry_the_limits_and_notes_the_figures_print():
    r = latency.estimate_latency()
    assert (r.slo_ttft_s, r.slo_tpot_s) == (0.45, 0.04)          # MLPerf v5.0 Llama 2 70B interactive
    assert r.note.startswith("Llama 3.1 8B in bf16, one request alone on the GPU")
    assert "TTFT 450 ms and TPOT 40 ms" in r.note and r.calibration_note in r.note
    together = latency.estimate_latency(latency.LatencyParams(concurrent_users=4))
    assert "4 identical requests together" in together.note
    load = latency.simulate_load(latency.LoadParams(gpu="H200", requests=10))
    assert load.note.startswith("Llama 3.1 8B in bf16 on one NVIDIA H200")
    assert "10 requests, Poisson arrivals" in load.note and load.calibration_note in load.note


@pytest.mark.parametrize("gpu", ["H100-SXM", "H200", "B200"])
@pytest.mark.parametrize("graphs", [True, False])
def test_decode_steps_at_every_context_at_once_are_the_one_by_one_numbers(gpu, graphs):
    """StepCost.decode_times_s costs a graph-replayed decode at every context length in one
    vectorised pass (the attention kernel is the only term that changes with the context):
    the same numbers, to the last bit, as costing each step alone; the H200 has a fitted
    attention backend, the B200 only the spec-sheet roofline."""
    cost = forward.StepCost("llama-3.1-8b", gpu, cuda_graphs=graphs)
    ctx = np.arange(0, 140_000, 4_999)
    for batch in (1, 16):
        each = np.array([cost.uniform_time_s(batch, 1, int(c)) for c in ctx])
        np.testing.assert_array_equal(cost.decode_times_s(batch, ctx, max_exact=ctx.size), each)
    cal = cost.calibration
    flops, nbytes = np.array([0.0, 1e9, 3e12]), np.array([1e6, 5e8, 2e10])
    assert cal.attention_times_s(flops, nbytes).tolist() == [cal.attention_time_s(f, b) for f, b in zip(flops, nbytes)]
    with pytest.raises(ValueError, match="context_tokens >= 0"):
        cost.decode_times_s(1, np.array([5, -1]))
    with pytest.raises(ValueError, match=">= 0"):
        cal.attention_times_s(np.array([1.0, -1.0]), np.array([1.0, 1.0]))


def test_the_shipped_calibrations_kept_curve_is_the_computed_one():
    """With the shipped calibration the attention-share curve and the decode costs of a model
    on a GPU are kept between calls (a prompt move redraws the same curve); the result
    equals the one computed afresh with that calibration passed in, and each call's arrays
    are its own."""
    from sim.calibration import for_gpu

    p = latency.LatencyParams(gpu="H200", prompt_tokens=12_345, output_tokens=300)
    kept = latency.estimate_latency(p)
    fresh = latency.estimate_latency(p, calibration=for_gpu(hardware.get("H200")))
    for name in ("ttft_s", "tpot_s", "e2e_s", "attention_share_of_prefill"):
        assert getattr(kept, name) == getattr(fresh, name), name
    for name in ("itl_s", "prompt_grid_tokens", "attention_share_grid"):
        np.testing.assert_array_equal(getattr(kept, name), getattr(fresh, name))
    kept.attention_share_grid[:] = 0
    assert latency.estimate_latency(p).attention_share_grid[0] == fresh.attention_share_grid[0] > 0
    longer = latency.estimate_latency(latency.LatencyParams(gpu="H200", prompt_tokens=131_072 + 1000))
    assert longer.prompt_grid_tokens[-1] == 131_072 + 1000       # a prompt past the model's context widens the curve
