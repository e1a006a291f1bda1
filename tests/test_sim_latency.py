"""TTFT, TPOT, E2E, attention share, goodput."""
from __future__ import annotations

import numpy as np
import pytest

from sim import calibration, hardware, latency, roofline, scheduler

SPEC = calibration.spec_sheet(hardware.get("H100-SXM"))


@pytest.mark.parametrize("preset", list(latency.PRESETS))
def test_presets_follow_the_definitions(preset):
    r = latency.estimate_latency(latency.LatencyParams(preset=preset), calibration=SPEC)
    w = latency.PRESETS[preset]
    assert (r.prompt_tokens, r.output_tokens) == (w.prompt_tokens, w.output_tokens)
    pre = roofline.prefill_pass("llama-3.1-8b", "H100-SXM", w.prompt_tokens, calibration=SPEC)
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
    assert m.goodput_requests_per_s == pytest.approx(0.2)
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
