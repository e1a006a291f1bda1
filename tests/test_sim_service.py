"""Chapter 20's service: traffic, token buckets, replicas driven request by request, the autoscaler, cost."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from sim import service as sv
from sim.forward import stored_weight_bytes
from sim.kv import kv_bytes_per_token
from sim.models import get as get_model
from sim.scheduler import Scheduler, SchedulerParams, simulate_schedule
from sim.workload import RequestMixParams, RequestSpec, make_request_mix

QUIET = dict(b_rate_per_s=0.0, tenant_tokens_per_s=None)           # tenant A alone, no limit


def _fixed(n: int, **kw) -> sv.ServiceParams:
    """n replicas all along: the autoscaler may not change them."""
    return sv.ServiceParams(min_replicas=n, max_replicas=n, initial_replicas=n, **kw)


# -- one replica is chapter 04's scheduler ------------------------------------------------------
def test_requests_submitted_one_by_one_run_as_one_batch_run():
    """submit + run_until at arbitrary moments gives the same timeline as simulate_schedule."""
    reqs = make_request_mix(RequestMixParams(requests=80, mean_interarrival_s=0.08, prompt_tokens_min=200,
                                             prompt_tokens_max=3000, output_tokens_min=20, output_tokens_max=600,
                                             seed=3))
    p = SchedulerParams(max_batch=32, chunked_prefill=True, token_budget=1024, requests=reqs)
    whole = simulate_schedule(p)
    s = sv.Engine(p)
    for r in reqs:
        s.run_until(r.arrival_s)
        s.submit(r)
    s.run_until(math.inf)
    first = np.array([r.first for r in s.reqs])
    finish = np.array([r.finish for r in s.reqs])
    np.testing.assert_allclose(first, whole.first_token_s, rtol=1e-12)
    np.testing.assert_allclose(finish, whole.finish_s, rtol=1e-12)


def test_one_replica_service_measures_what_the_scheduler_gives():
    p = _fixed(1, duration_s=40.0, rate_per_s=4.0, arrivals="poisson", **QUIET)
    r = sv.service(p)
    specs = tuple(a.spec for a in sv.workload(p))
    run = simulate_schedule(replace(p.scheduler(), requests=specs))
    np.testing.assert_allclose(r.request_ttft_s, run.ttft_s, rtol=1e-12)
    np.testing.assert_allclose(r.request_tpot_s, run.tpot_s, rtol=1e-12)
    assert r.requests == {"A": len(specs), "B": 0}
    assert r.output_tokens == int(run.output_tokens.sum())
    assert r.ttft_p99_all_s == pytest.approx(float(np.percentile(run.ttft_s, 99)), rel=1e-12)
    assert r.tpot_p99_all_s == pytest.approx(float(np.percentile(run.tpot_s, 99)), rel=1e-12)
    bins = np.minimum((run.arrival_s / p.bin_s).astype(int), 3)
    for b in range(4):
        assert r.binned_ttft_p50_s[b] == pytest.approx(float(np.median(run.ttft_s[bins == b])), rel=1e-12)
    # one GPU for the whole run, billed until the last request finished
    assert r.gpu_hours == pytest.approx(run.finish_s.max() / 3600, rel=1e-12)
    assert r.end_s == pytest.approx(float(run.finish_s.max()), rel=1e-12)


# -- traffic ------------------------------------------------------------------------------------
@pytest.mark.parametrize("arrivals,k", [("bursty", 3.0), ("bursty", 5.0), ("daily", 2.0), ("daily", 1.5), ("daily", 5.0),
                                         ("poisson", 1.0)])
def test_every_traffic_shape_keeps_its_mean_and_its_peak(arrivals, k):
    p = sv.ServiceParams(arrivals=arrivals, peak_to_mean=k, rate_per_s=6.0)
    t = np.linspace(0.0, p.duration_s, 180_001)[:-1]
    rate = sv.rate_at(p, t)
    assert rate.mean() == pytest.approx(6.0, rel=1e-3)
    assert rate.max() == pytest.approx(sv.peak_rate(p), rel=1e-6)
    assert rate.min() >= 0.0


def test_arrivals_are_seeded_poisson_counts():
    p = sv.ServiceParams(arrivals="poisson", rate_per_s=6.0, b_rate_per_s=0.5)
    w = sv.workload(p)
    assert w == sv.workload(p)                           # seeded
    n_a = sum(a.tenant == "A" for a in w)
    n_b = sum(a.tenant == "B" for a in w)
    assert abs(n_a - 6.0 * 180) < 4 * math.sqrt(6.0 * 180)
    assert abs(n_b - 0.5 * 180) < 4 * math.sqrt(0.5 * 180)
    times = [a.spec.arrival_s for a in w]
    assert times == sorted(times)
    storm = sv.workload(replace(p, **sv.TENANT_B["storm"]))
    assert all(60.0 <= a.spec.arrival_s <= 120.0 for a in storm if a.tenant == "B")
    assert all(16384 <= a.spec.prompt_tokens <= 65536 for a in storm if a.tenant == "B")


# -- admission ----------------------------------------------------------------------------------
def test_no_tenant_gets_more_tokens_than_its_bucket_allows():
    """Tokens reserved by admitted requests <= a full bucket + rate x time + what came back, and the limit binds."""
    p = _fixed(2, arrivals="poisson", rate_per_s=6.0, tenant_tokens_per_s=8000.0, b_rate_per_s=0.0)
    r = sv.service(p)
    w = sv.workload(p)
    assert 0 < r.rejected["A"] < r.requests["A"]
    assert int((~r.admitted).sum()) == r.rejected["A"]
    reserved = sum(a.spec.prompt_tokens + p.max_tokens("A") for a, ok in zip(w, r.admitted) if ok)
    assert r.reserved_tokens["A"] == reserved
    allowed = p.tenant_tokens_per_s * (p.bucket_s + max(a.spec.arrival_s for a in w))
    assert reserved <= allowed + r.refunded_tokens["A"]
    assert reserved >= 0.9 * allowed                          # demand (about 13,000 tokens/s) exceeds the limit
    assert np.isnan(r.request_ttft_s[~r.admitted]).all() and np.isfinite(r.request_ttft_s[r.admitted]).all()
    outputs = np.array([a.spec.output_tokens for a in w])
    assert r.output_tokens == int(outputs[r.admitted].sum())


def test_without_a_limit_nothing_is_rejected_and_a_tiny_bucket_rejects_everything():
    assert sv.service(_fixed(1, duration_s=30.0, **QUIET)).rejected == {"A": 0, "B": 0}
    r = sv.service(_fixed(1, duration_s=30.0, b_rate_per_s=0.0, tenant_tokens_per_s=10.0))
    assert r.rejected["A"] == r.requests["A"] > 0         # 100 tokens of bucket: no request fits
    assert r.output_tokens == 0 and r.cost_per_m_tokens == math.inf


# -- replicas, the autoscaler, cost ---------------------------------------------------------
def test_the_hpa_rule():
    p = sv.ServiceParams(signal="queue", queue_target=4.0, min_replicas=1, max_replicas=8)
    assert sv._desired(p, 2, 8.0) == 4                    # ceil(2 x 8 / 4)
    assert sv._desired(p, 2, 4.3) == 2                    # within 10% of the target: unchanged
    assert sv._desired(p, 3, 5.0) == 4                    # ceil(3.75)
    assert sv._desired(p, 2, 0.0) == 1                    # never below min_replicas
    assert sv._desired(p, 4, 100.0) == 8                  # nor above max_replicas


def test_a_new_replica_waits_for_its_weights_and_its_start():
    for name, _, rate, _ in sv.WEIGHT_SOURCES:
        p = sv.ServiceParams(weights_from=name)
        assert sv.load_s(p) == pytest.approx(stored_weight_bytes("llama-3.1-8b") / rate + p.engine_start_s)
    assert sv.load_s(sv.ServiceParams(weights_from="net10", engine_start_s=0.0)) == pytest.approx(
        16.06e9 / 1.25e9, rel=1e-3)


def test_a_fixed_deployment_bills_its_gpus_for_the_whole_run():
    r = sv.service(_fixed(3, duration_s=60.0, gpu_price_per_hour=4.0, **QUIET))
    assert list(r.replicas_ready) == [3] and list(r.replicas_billed) == [3]
    assert r.gpu_hours == pytest.approx(3 * r.end_s / 3600, rel=1e-12)
    assert r.cost == pytest.approx(4.0 * r.gpu_hours, rel=1e-12)
    assert r.cost_per_m_tokens == pytest.approx(r.cost / r.output_tokens * 1e6, rel=1e-12)


def test_a_new_price_reprices_the_same_run():
    a, b = sv.service(sv.ServiceParams(gpu_price_per_hour=2.0)), sv.service(sv.ServiceParams(gpu_price_per_hour=6.0))
    assert a.gpu_hours == b.gpu_hours and b.cost == pytest.approx(3 * a.cost)
    assert b.static_cost_per_m_tokens == pytest.approx(3 * a.static_cost_per_m_tokens)


def test_scaling_up_serves_only_after_the_load_time():
    r = sv.service(sv.ServiceParams(signal="queue"))
    t, ready, billed = r.replica_t_s, r.replicas_ready, r.replicas_billed
    asked = [(i, billed[i] - billed[i - 1]) for i in range(1, t.size) if billed[i] > billed[i - 1]]
    assert asked
    for i, extra in asked:   # the replicas asked for at t[i] serve from t[i] + load_s, not before
        j = int(np.nonzero(np.isclose(t, t[i] + r.load_s))[0][0])
        assert ready[j] - ready[j - 1] == extra
        assert (ready[i:j] <= ready[i - 1]).all()


def test_a_lost_replica_sends_its_requests_again_and_all_finish():
    p = sv.ServiceParams(lose_replica_at_s=95.0)
    r = sv.service(p)
    assert r.retried > 0
    w = sv.workload(p)
    assert r.output_tokens == sum(a.spec.output_tokens for a in w)    # every request done, once
    i = int(np.searchsorted(r.replica_t_s, 95.0))
    assert r.replica_t_s[i] == 95.0 and r.replicas_ready[i] == r.replicas_ready[i - 1] - 1


def test_the_capacity_plan_reads_p99_below_p50():
    plan = sv.service(sv.ServiceParams()).plan
    assert 0 < plan.rate_p99_per_s <= plan.rate_p50_per_s
    assert plan.headroom == pytest.approx(plan.rate_p50_per_s / plan.rate_p99_per_s - 1)
    assert (np.diff(plan.worst_p99[2:]) > 0).all()                  # past the flat part, it only worsens
    assert plan.replicas_for(2.5 * plan.rate_p99_per_s) == 3


# -- preemption ---------------------------------------------------------------------------------
def _pressed(preemption: str):
    reqs = make_request_mix(RequestMixParams(requests=40, mean_interarrival_s=0.02, prompt_tokens_min=500,
                                             prompt_tokens_max=2000, output_tokens_min=200, output_tokens_max=800,
                                             seed=1))
    return simulate_schedule(SchedulerParams(max_batch=32, chunked_prefill=True, token_budget=1024,
                                             kv_capacity_tokens=12_000, requests=reqs, preemption=preemption)), reqs


def test_swapping_keeps_the_kv_that_recomputing_throws_away():
    rec, reqs = _pressed("recompute")
    swp, _ = _pressed("swap")
    assert rec.preemptions.sum() > 0 and swp.preemptions.sum() > 0
    assert swp.recomputed_tokens < rec.recomputed_tokens
    assert (swp.emitted_tokens == np.array([r.output_tokens for r in reqs])).all()


def test_a_swap_costs_its_bytes_over_the_link():
    """Two runs that differ only in the link: the slower one is longer by the copies' extra time."""
    fast, _ = _pressed_swap(1e13)
    slow, s = _pressed_swap(1e9)
    per_token = kv_bytes_per_token(get_model("llama-3.1-8b"), "bf16")
    copies = 2 * s.swapped_tokens * per_token      # out and back in
    assert s.swapped_tokens > 0
    assert slow.busy_s - fast.busy_s == pytest.approx(copies * (1 / 1e9 - 1 / 1e13), rel=1e-6)


def _pressed_swap(rate: float):
    """Two requests whose caches outgrow the KV: the newer, decoding, is swapped out until the first is done."""
    reqs = (RequestSpec("a", 0.0, 3000, 400), RequestSpec("b", 0.5, 3000, 200))
    s = Scheduler(SchedulerParams(max_batch=4, kv_capacity_tokens=6400, requests=reqs, preemption="swap",
                                  swap_bytes_per_s=rate))
    return s.run(), s


# -- bad input ----------------------------------------------------------------------------------
@pytest.mark.parametrize("kw,words", [
    (dict(arrivals="daily", peak_to_mean=11.0), "peak_to_mean"),
    (dict(arrivals="weekly"), "arrivals"),
    (dict(min_replicas=4, max_replicas=2), "min_replicas"),
    (dict(lose_replica_at_s=500.0), "lose_replica_at_s"),
    (dict(signal="gpu-util"), "signal"),
    (dict(weights_from="floppy"), "weights_from"),
    (dict(duration_s=1e6), "duration_s"),
    (dict(preemption="drop"), "preemption"),
])
def test_bad_input_is_named(kw, words):
    with pytest.raises(ValueError, match=words):
        sv.ServiceParams(**kw)
