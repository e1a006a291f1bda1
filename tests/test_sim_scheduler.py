"""Iteration-level scheduler: conservation, limits, determinism, and the behaviours the chapter shows."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim import forward, hardware, kernel_model, kv, latency, scheduler
from sim.scheduler import (SLOT_DECODE, SLOT_IDLE, SLOT_PADDING, SLOT_PREFILL, RequestSpec, ScheduleResult,
                           SchedulerParams)

SPEC = kernel_model.spec_sheet(hardware.get("H100-SXM"))


def run(**kw) -> scheduler.ScheduleResult:
    return scheduler.simulate_schedule(SchedulerParams(**kw), calibration=SPEC)


def check_conservation(r: scheduler.ScheduleResult, p: SchedulerParams) -> None:
    specs = p.workload()
    prompts = np.array([s.prompt_tokens for s in specs])
    outputs = np.array([s.output_tokens for s in specs])
    # every request produced exactly its output tokens, each from a prefill's logits or a decode step
    assert np.array_equal(r.emitted_tokens, outputs)
    assert r.decode_tokens + r.prefill_emissions == outputs.sum()
    # every processed token ends in a finished request's cache or was discarded by a preemption
    assert r.prefill_tokens + r.decode_tokens == (prompts + outputs - 1).sum() + r.discarded_tokens
    assert r.prefill_tokens == prompts.sum() + r.recomputed_tokens
    assert r.step_prefill_tokens.sum() == r.prefill_tokens
    assert r.step_decode_tokens.sum() == r.decode_tokens + r.padding_tokens
    # limits
    assert np.all(r.step_kv_tokens <= r.kv_capacity_tokens)
    if r.chunked_prefill:
        assert np.all(r.step_prefill_tokens + r.step_decode_tokens <= p.token_budget)
    for row_r, row_k in zip(r.slot_request, r.slot_kind):
        live = row_r[row_r >= 0]
        assert len(set(live.tolist())) == len(live)                  # a request holds at most one slot
        assert np.all((row_r < 0) == (row_k == SLOT_IDLE))
    # time
    assert np.all(r.step_end_s > r.step_start_s)
    assert np.all(r.step_start_s[1:] >= r.step_end_s[:-1] - 1e-15)   # one step at a time
    assert np.all(r.first_token_s > r.arrival_s) and np.all(r.finish_s >= r.first_token_s)
    assert np.all(r.admitted_s >= r.arrival_s)


requests_st = st.lists(st.tuples(st.floats(0, 0.2), st.integers(1, 3000), st.integers(1, 60)), min_size=1,
                       max_size=14)


@settings(max_examples=60, deadline=None)
@given(requests_st, st.sampled_from(["static", "continuous"]), st.booleans(), st.integers(1, 8),
       st.integers(1, 700), st.integers(3100, 12000), st.sampled_from([1, 16]), st.sampled_from([0.0, 0.03, 1.0]))
def test_conservation_and_limits(reqs, policy, chunked, max_batch, budget, capacity, block, timeout):
    specs = tuple(RequestSpec(f"q{i}", a, pr, out) for i, (a, pr, out) in enumerate(reqs))
    p = SchedulerParams(policy=policy, chunked_prefill=chunked, max_batch=max_batch, token_budget=budget,
                        kv_capacity_tokens=capacity, block_size=block, requests=specs, batch_timeout_s=timeout)
    r = scheduler.simulate_schedule(p, calibration=SPEC)
    check_conservation(r, p)


def same_results(a, b) -> list:
    """Names of the fields in which two results (dataclasses, nested) differ at all: arrays
    element by element to the last bit (NaN equal to NaN), floats and everything else by ==.
    A schedule's slot timeline is compared step by step (its rows may group steps differently)."""
    out = []
    names = [f.name for f in dataclasses.fields(a)]
    if isinstance(a, ScheduleResult):
        names = [n for n in names if not n.startswith("row_")] + ["slot_request", "slot_kind"]
    for name in names:
        x, y = getattr(a, name), getattr(b, name)
        if dataclasses.is_dataclass(x):
            out += [f"{name}.{d}" for d in same_results(x, y)]
        elif isinstance(x, np.ndarray):
            if not (x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y, equal_nan=x.dtype.kind == "f")):
                out.append(name)
        elif not (x == y or (isinstance(x, float) and math.isnan(x) and math.isnan(y))):
            out.append(name)
    return out


def step_by_step(mp: pytest.MonkeyPatch) -> None:
    """Every step planned, timed and recorded alone, on a StepCost of its own (no shared memo)."""
    mp.setattr(scheduler.Scheduler, "_decode_run", lambda self: None)
    mp.setattr(scheduler, "step_cost", lambda *a, **k: forward.StepCost(*a, **k))


def test_step_costs_of_a_size_do_not_depend_on_the_sizes_costed_with_it():
    # the shared StepCost keeps its memo between calls, so its numbers must not depend on history
    for cal in (SPEC, None):
        alone = forward.StepCost("llama-3.1-8b", "H100-SXM", calibration=cal)
        alone.prime(tokens=[37], logits=[37])
        many = forward.StepCost("llama-3.1-8b", "H100-SXM", calibration=cal)
        many.prime(tokens=np.arange(1, 700), logits=np.arange(1, 700))
        for graphs in (True, False):
            assert alone.time_s([37], [1000], cuda_graphs=graphs) == many.time_s([37], [1000], cuda_graphs=graphs)


@pytest.mark.parametrize("graphs", [True, False])
def test_a_run_of_decode_steps_costs_each_step_as_alone(graphs):
    cost = forward.StepCost("llama-3.1-8b", "H100-SXM", calibration=SPEC)
    contexts = [5, 700, 31, 4096]
    for steps in (forward.SHORT_RUN_STEPS, forward.SHORT_RUN_STEPS + 1, 50):    # costed step by step, and at once
        run = cost.decode_run_s(len(contexts), sum(contexts), steps, cuda_graphs=graphs)
        alone = [cost.time_s([1] * 4, [c + j for c in contexts], logits_seqs=4, cuda_graphs=graphs)
                 for j in range(steps)]
        assert run.tolist() == alone
    assert cost.decode_run_s(4, 100, 0).size == 0
    with pytest.raises(ValueError, match="seqs >= 1"):
        cost.decode_run_s(0, 100, 3)


MIX = scheduler.make_request_mix(scheduler.RequestMixParams(requests=40, mean_interarrival_s=0.01, seed=3))


@pytest.mark.parametrize("kw", [
    {}, {"chunked_prefill": True}, {"cuda_graphs": False}, {"max_batch": 32, "kv_capacity_tokens": 3000},
    {"max_batch": 32, "chunked_prefill": True, "token_budget": 256, "add_long_prompt": True},
    {"policy": "static"}, {"policy": "static", "max_batch": 16, "batch_timeout_s": 0.0, "cuda_graphs": False},
    # four long answers that outgrow the cache while decoding: the run ends where a block runs out
    {"requests": tuple(RequestSpec(f"g{i}", 0.0, 200, 400) for i in range(4)), "kv_capacity_tokens": 1200}])
def test_decode_steps_run_in_one_pass_give_the_step_by_step_timeline(kw):
    p = SchedulerParams(**{"requests": MIX, **kw})
    fast = scheduler.Scheduler(p)                    # the shipped calibration: its StepCost is shared
    a = fast.run()
    with pytest.MonkeyPatch.context() as mp:
        step_by_step(mp)
        b = scheduler.simulate_schedule(p)
    assert same_results(a, b) == []
    assert max(fast.rows_steps) > 10                  # the runs did take the one-pass path
    if "kv_capacity_tokens" in kw:
        assert a.preemptions.sum() > 0                # and met a full cache


@pytest.mark.parametrize("kw", [{}, {"rate_per_s": 40.0}, {"rate_per_s": 4.0, "chunked_prefill": False},
                                {"gpu": "A100-80GB", "rate_per_s": 9.0}])
def test_loaded_server_figure_is_the_step_by_step_run(kw):
    a = latency.simulate_load(latency.LoadParams(**kw))
    with pytest.MonkeyPatch.context() as mp:
        step_by_step(mp)
        b = latency.simulate_load(latency.LoadParams(**kw))
    assert same_results(a, b) == []


@settings(max_examples=40, deadline=None)
@given(requests_st, st.sampled_from(["static", "continuous"]), st.booleans(), st.integers(1, 8),
       st.integers(1, 700), st.integers(3100, 12000), st.sampled_from([1, 16]), st.booleans(),
       st.sampled_from([0.0, 0.03]))
def test_decode_runs_match_step_by_step_on_any_workload(reqs, policy, chunked, max_batch, budget, capacity, block,
                                                        graphs, timeout):
    specs = tuple(RequestSpec(f"q{i}", a, pr, out) for i, (a, pr, out) in enumerate(reqs))
    p = SchedulerParams(policy=policy, chunked_prefill=chunked, max_batch=max_batch, token_budget=budget,
                        kv_capacity_tokens=capacity, block_size=block, requests=specs, cuda_graphs=graphs,
                        batch_timeout_s=timeout)
    a = scheduler.simulate_schedule(p, calibration=SPEC)
    with pytest.MonkeyPatch.context() as mp:
        step_by_step(mp)
        b = scheduler.simulate_schedule(p, calibration=SPEC)
    assert same_results(a, b) == []


def test_deterministic():
    p = SchedulerParams(add_long_prompt=True, chunked_prefill=True)
    a = scheduler.simulate_schedule(p, calibration=SPEC)
    b = scheduler.simulate_schedule(p, calibration=SPEC)
    assert np.array_equal(a.step_start_s, b.step_start_s) and np.array_equal(a.slot_request, b.slot_request)
    assert np.array_equal(a.ttft_s, b.ttft_s)


def test_same_time_arrivals_keep_their_order():
    specs = tuple(RequestSpec(n, 0.0, 100, 5) for n in ["c", "a", "b"])
    r = run(requests=specs, max_batch=1)
    assert r.requests == ["c", "a", "b"]
    assert np.all(np.diff(r.first_token_s) > 0)


def test_single_request_matches_the_roofline():
    r = run(requests=(RequestSpec("x", 0.0, 1000, 50),))
    pre = forward.prefill_pass("llama-3.1-8b", "H100-SXM", 1000, calibration=SPEC)
    assert r.ttft_s[0] == pytest.approx(pre.time_s)
    steps = [forward.decode_step("llama-3.1-8b", "H100-SXM", 1, 1000 + i, calibration=SPEC).time_s for i in range(49)]
    assert r.tpot_s[0] == pytest.approx(np.mean(steps))
    assert r.e2e_s[0] == pytest.approx(pre.time_s + sum(steps))


def test_static_batches_wait_for_the_longest_request():
    specs = (RequestSpec("short", 0.0, 50, 5), RequestSpec("long", 0.0, 50, 40), RequestSpec("late", 0.001, 50, 5))
    r = run(policy="static", requests=specs, max_batch=2)
    i = r.requests.index("late")
    assert r.admitted_s[i] >= r.finish_s[r.requests.index("long")] - 1e-12
    assert r.padding_tokens == 40 - 5                           # "short" pads until "long" is done
    assert (r.slot_kind == SLOT_PADDING).sum() == 35
    c = run(policy="continuous", requests=specs, max_batch=2)
    assert c.ttft_s[i] < r.ttft_s[i]                            # continuous batching lets it in at once


def test_continuous_batching_beats_static_on_the_default_mix():
    comp = scheduler.compare_schedules(SchedulerParams(), calibration=SPEC)
    s, c = comp.static, comp.continuous
    assert np.mean(c.ttft_s) < np.mean(s.ttft_s) / 3
    assert c.makespan_s < s.makespan_s
    assert c.padding_tokens == 0 and s.padding_tokens > 0


def test_without_chunking_a_long_prompt_stalls_decodes_and_chunking_bounds_the_stall():
    base = SchedulerParams(add_long_prompt=True)
    plain = scheduler.simulate_schedule(base, calibration=SPEC)
    chunked = scheduler.simulate_schedule(replace(base, chunked_prefill=True, token_budget=512), calibration=SPEC)
    long_prefill = forward.prefill_pass("llama-3.1-8b", "H100-SXM", 8000, calibration=SPEC).time_s
    assert plain.longest_decode_stall_s >= 0.9 * long_prefill      # decodes wait out the whole prompt
    assert chunked.longest_decode_stall_s < plain.longest_decode_stall_s / 5
    i = chunked.requests.index("long")
    chunk_steps = ((chunked.slot_request == i) & (chunked.slot_kind == SLOT_PREFILL)).any(axis=1).sum()
    assert chunk_steps >= 8000 // 512                               # the prompt is spread over steps
    assert (plain.slot_kind == scheduler.SLOT_STALLED).any()


def test_preemption_when_the_cache_is_full():
    specs = tuple(RequestSpec(f"p{i}", 0.0, 300, 200) for i in range(4))
    r = run(requests=specs, kv_capacity_tokens=1200, max_batch=4)
    assert r.preemptions.sum() > 0 and r.recomputed_tokens > 0 and r.discarded_tokens > 0
    check_conservation(r, SchedulerParams(requests=specs, kv_capacity_tokens=1200, max_batch=4))


def test_default_capacity_is_what_fits_in_memory():
    p = SchedulerParams()
    expected = int((0.9 * 81_559 * 2 ** 20 - 16_060_522_496 - 2 * 2 ** 30) // (128 * 1024))   # driver MiB, reserve
    assert kv.kv_capacity_tokens(p.model, p.gpu, p.precision) == expected
    with pytest.raises(ValueError, match="do not fit"):
        kv.kv_capacity_tokens("llama-3.1-405b", "H100-SXM")


def test_metrics_of_the_default_runs():
    r = run()
    assert 0 < r.slot_utilisation <= 1
    assert r.longest_decode_stall_s == pytest.approx(r.max_itl_s.max())
    assert r.throughput_tokens_per_s == pytest.approx(r.output_tokens.sum() / r.makespan_s)
    assert r.slot_kind.shape == (r.steps, 8) and set(np.unique(r.slot_kind)) <= {0, 1, 2, 3, 4}
    assert (r.slot_kind == SLOT_DECODE).sum() == r.decode_tokens


def test_request_mix_is_seeded():
    a = scheduler.make_request_mix(scheduler.RequestMixParams(seed=5))
    b = scheduler.make_request_mix(scheduler.RequestMixParams(seed=5))
    c = scheduler.make_request_mix(scheduler.RequestMixParams(seed=6))
    assert a == b and a != c
    assert all(32 <= r.prompt_tokens <= 1024 and 8 <= r.output_tokens <= 128 for r in a)


@pytest.mark.parametrize("call, match", [
    (lambda: SchedulerParams(policy="fifo"), "valid policies: static, continuous"),
    (lambda: SchedulerParams(token_budget=0), "token_budget must be >= 1"),
    (lambda: SchedulerParams(max_batch=-2), "max_batch must be >= 1"),
    (lambda: RequestSpec("x", -1.0, 10, 10), "arrival_s must be >= 0"),
    (lambda: RequestSpec("x", 0.0, 0, 10), "prompt_tokens must be >= 1"),
    (lambda: SchedulerParams(requests=(RequestSpec("a", 0, 1, 1), RequestSpec("a", 0, 1, 1))), "unique"),
    (lambda: scheduler.simulate_schedule(SchedulerParams(requests=(RequestSpec("big", 0, 5000, 10),),
                                                         kv_capacity_tokens=4096)), "more than the capacity"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_static_batch_waits_for_a_full_batch_or_the_timeout():
    # eight requests 10 ms apart fill eight slots at 70 ms, before a 1 s timeout
    eight = tuple(RequestSpec(f"q{i}", 0.01 * i, 100, 5) for i in range(8))
    r = run(policy="static", requests=eight, batch_timeout_s=1.0)
    assert np.all(r.admitted_s == pytest.approx(0.07))
    # three requests never fill the batch: it starts when the oldest has waited the timeout
    three = eight[:3]
    r = run(policy="static", requests=three, batch_timeout_s=0.05)
    assert np.all(r.admitted_s == pytest.approx(0.05))
    # no timeout: an idle GPU starts at once with whoever is there
    r = run(policy="static", requests=three, batch_timeout_s=0.0)
    assert r.admitted_s[0] == 0.0
    # the continuous scheduler ignores the timeout
    a = run(requests=three, batch_timeout_s=0.0)
    b = run(requests=three, batch_timeout_s=0.5)
    assert np.array_equal(a.ttft_s, b.ttft_s)


def test_batch_timeout_is_validated():
    with pytest.raises(ValueError, match="batch_timeout_s"):
        SchedulerParams(batch_timeout_s=-0.1)


def test_chunked_prefill_s_matches_the_scheduler():
    one = (RequestSpec("p", 0.0, 8192, 1),)
    for budget in (512, 3000, 8192):
        r = run(requests=one, chunked_prefill=True, token_budget=budget)
        assert latency.chunked_prompt_s("llama-3.1-8b", "H100-SXM", 8192, budget,
                                           calibration=SPEC) == pytest.approx(r.ttft_s[0], rel=1e-12)
    whole = run(requests=one)
    assert latency.chunked_prompt_s("llama-3.1-8b", "H100-SXM", 8192, 10_000,
                                       calibration=SPEC) == pytest.approx(whole.ttft_s[0], rel=1e-12)
