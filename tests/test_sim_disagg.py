"""Chapter 19's planner: colocated against P prefill + D decode GPUs (sim.disagg), and the
scheduler's requests that arrive with their KV."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from sim import disagg as dg
from sim.batch import Precision
from sim.forward import step_cost
from sim.latency import goodput
from sim.scheduler import SchedulerParams, simulate_schedule
from sim.workload import RequestSpec, make_request_mix

TIGHT = dg.DisaggParams(prompt_tokens=4096, tpot_slo_s=0.015)


@pytest.fixture(scope="module")
def tight():
    return dg.disagg(TIGHT)


def test_colocated_goodput_is_chapter_05s_on_the_same_inputs(tight):
    """Below the capacity bound the colocated curve is chapter 05's loaded server, rate by rate."""
    below = tight.rates_per_gpu[tight.rates_per_gpu < tight.capacities.colocated]
    assert 0 < tight.goodput_per_gpu["colocated"] < below[-1]          # the limits bind before the bound does
    ch05 = goodput(TIGHT.load(1.0), rates_per_s=tuple(float(r) for r in below))
    assert tight.goodput_per_gpu["colocated"] == ch05.goodput_per_s
    np.testing.assert_array_equal(tight.attainment["colocated"][:below.size], ch05.attainment)
    assert (tight.attainment["colocated"][below.size:] == 0).all()


def test_transfer_is_the_prompts_kv_over_the_link():
    r = dg.disagg(TIGHT)
    assert r.kv_bytes == 4096 * 128 * 1024                              # Llama 3.1 8B: 128 KiB a token in bf16
    assert r.transfer_s["ib400"] == pytest.approx(4096 * 131072 / 50e9, rel=1e-12)   # 400 Gb/s = 50 GB/s
    assert r.transfer_s["eth25"] == pytest.approx(4096 * 131072 / 3.125e9, rel=1e-12)
    assert r.transfer_s["nvlink"] == pytest.approx(4096 * 131072 / 450e9, rel=1e-12)  # H100: 900 GB/s both ways
    i = int(np.searchsorted(r.prompt_sweep, 4096))
    assert r.prompt_sweep[i] == 4096 and r.prefill_sweep_s[i] == pytest.approx(r.prefill_s, rel=1e-12)
    share = r.transfer_sweep_s["ib400"] / (r.transfer_sweep_s["ib400"] + r.prefill_sweep_s)
    assert share[0] > share[-1]              # prefill grows faster than the bytes: the transfer's share shrinks


def test_capacities_from_the_step_costs():
    p = dg.DisaggParams()
    c = dg.capacities(p)
    mix = make_request_mix(p.load(1.0).mix())
    outputs = np.array([r.output_tokens for r in mix])
    held = np.mean([r.prompt_tokens + r.output_tokens / 2 for r in mix])
    step = step_cost(p.model, p.gpu, Precision()).uniform_time_s(c.decode_batch, 1, int(round(held)), cuda_graphs=True)
    assert c.decode_batch == p.max_batch                                   # 128 such requests fit in an H100's KV
    assert c.decode == pytest.approx(c.decode_batch / (outputs.mean() * step), rel=1e-12)
    assert c.colocated == min(c.prefill, c.decode)
    big = dg.capacities(dg.DisaggParams(prompt_tokens=16384))
    assert big.decode_batch < p.max_batch                                  # long prompts: the KV room binds


def test_a_split_beyond_its_capacity_meets_nothing():
    r = dg.disagg(dg.DisaggParams())
    for (p, d), att in ((s, r.attainment[dg.split_key(s)]) for s in dg.splits(r.params.max_gpus)):
        n = p + d
        over = (r.rates_per_gpu * n / p >= r.capacities.prefill) | (r.rates_per_gpu * n / d >= r.capacities.decode)
        assert (att[over] == 0).all()
        assert r.goodput_per_gpu[f"{p}:{d}"] < min(r.capacities.prefill * p, r.capacities.decode * d) / n


def test_the_chapters_regimes():
    """Chapter 19's claims: loose limits favour colocated, a tight TPOT with long prompts a
    prefill-heavy split, short prompts a decode-heavy one that loses, a slow link no split."""
    d = dg.disagg(dg.DisaggParams())
    assert d.goodput_per_gpu["colocated"] > d.goodput_per_gpu[d.best]
    t = dg.disagg(TIGHT)
    assert t.best_split[0] > t.best_split[1] and t.goodput_per_gpu[t.best] > t.goodput_per_gpu["colocated"]
    s = dg.disagg(dg.DisaggParams(prompt_tokens=256))
    assert s.best_split[0] < s.best_split[1] and s.goodput_per_gpu[s.best] < s.goodput_per_gpu["colocated"]
    slow = dg.disagg(replace(TIGHT, link="eth25"))
    assert all(slow.goodput_per_gpu[dg.split_key(k)] == 0 for k in dg.splits(4)) and slow.goodput_per_gpu["colocated"] > 0


def test_the_limits_and_link_reuse_the_simulated_runs():
    """Only the workload decides the runs: a change of limits or link thresholds the same latencies."""
    dg.disagg(TIGHT)
    before = dg._pool_runs.cache_info().misses, dg._colocated_runs.cache_info().misses
    dg.disagg(replace(TIGHT, ttft_slo_s=1.0, tpot_slo_s=0.02, link="nvlink"))
    assert (dg._pool_runs.cache_info().misses, dg._colocated_runs.cache_info().misses) == before


@pytest.mark.parametrize("field,value,message", [
    ("prompt_tokens", 10 ** 9, "prompt_tokens must be <="),
    ("prompt_tokens", 1, "prompt_tokens must be >= 2"),
    ("link", "carrier pigeon", "unknown link .carrier pigeon.; valid links: nvlink"),
    ("ttft_slo_s", 0.0, "ttft_slo_s"),
    ("max_gpus", 1, "max_gpus must be >= 2"),
    ("requests", 5, "requests must be >= 10"),
])
def test_bad_input_is_named(field, value, message):
    with pytest.raises(ValueError, match=message):
        dg.DisaggParams(**{field: value})


# --- the scheduler's kv_ready requests (a decode GPU) ----------------------------------------

def test_a_request_arriving_with_its_kv_only_decodes():
    """Alone on the GPU: each later token is one decode step on a context one longer."""
    spec = RequestSpec("a", 1.0, 1000, 5, kv_ready=True)
    r = simulate_schedule(SchedulerParams(requests=(spec,)))
    cost = step_cost("llama-3.1-8b", "H100-SXM", Precision())
    steps = [cost.time_s([1], [1000 + k], logits_seqs=1, cuda_graphs=True) for k in range(4)]
    assert r.prefill_tokens == 0 and r.recomputed_tokens == 0 and r.prefill_emissions == 0
    assert r.ttft_s[0] == 0.0 and r.first_token_s[0] == 1.0
    assert r.finish_s[0] == pytest.approx(1.0 + sum(steps), rel=1e-12)
    assert r.tpot_s[0] == pytest.approx(sum(steps) / 4, rel=1e-12)
    assert r.decode_tokens == 4 and int(r.emitted_tokens[0]) == 5


def test_kv_ready_requests_need_a_plain_continuous_scheduler():
    spec = (RequestSpec("a", 0.0, 100, 5, kv_ready=True),)
    for bad in ({"chunked_prefill": True}, {"policy": "static"}):
        with pytest.raises(ValueError, match="arrive with their KV"):
            SchedulerParams(requests=spec, **bad)
    with pytest.raises(ValueError, match="output_tokens must be >= 2"):
        RequestSpec("b", 0.0, 100, 1, kv_ready=True)


def test_a_preempted_kv_ready_request_recomputes_its_prompt():
    """KV room for one request at a time: the second is preempted and prefills what it had."""
    reqs = tuple(RequestSpec(f"r{i}", 0.0, 64, 40, kv_ready=True) for i in range(2))
    r = simulate_schedule(SchedulerParams(requests=reqs, kv_capacity_tokens=160, block_size=16))
    assert r.preemptions.sum() >= 1 and r.recomputed_tokens > 0
    assert (r.emitted_tokens == 40).all() and math.isfinite(r.finish_s.max())
