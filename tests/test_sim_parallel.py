"""TP x PP x DP planner."""
from __future__ import annotations

import pytest

from sim import forward, hardware, kernel_model, parallel
from sim.batch import Batch

SPEC = kernel_model.spec_sheet(hardware.get("H100-SXM"))


def test_allreduce_formula():
    assert parallel.allreduce_time_s(1e6, 1, 1e9) == 0.0
    assert parallel.allreduce_time_s(1e6, 4, 1e9, latency_s=0.0) == pytest.approx(2 * 3 / 4 * 1e-3)


def test_default_plan():
    r = parallel.plan_parallel(calibration=SPEC)
    c = r.chosen
    assert (c.tp, c.pp, c.gpus) == (4, 1, 4)
    assert c.weight_bytes_per_gpu == pytest.approx(r.weight_bytes / 4)
    assert c.kv_bytes_per_gpu == pytest.approx(r.kv_bytes / 4)
    assert c.used_bytes_per_gpu <= 80e9
    assert r.min_gpus_by_memory == 3          # by memory alone 3 would do; TP wants a power of two
    assert c.comm_time_s > 0


def test_tensor_parallel_adds_bandwidth():
    r = parallel.plan_parallel(parallel.ParallelParams(model="llama-3.1-8b", users=1, context_tokens=1024),
                               calibration=SPEC)
    t = {l.tp: l.step_time_s for l in r.candidates if l.pp == 1}
    assert t[1] > t[2] > t[4] > t[8]
    assert t[1] / t[8] < 8                    # communication and replicated ops keep it under linear


def test_pipeline_parallel_adds_room_not_speed():
    r = parallel.plan_parallel(parallel.ParallelParams(model="llama-3.1-405b"), calibration=SPEC)
    assert (r.chosen.tp, r.chosen.pp) == (8, 2)
    tp8 = next(l for l in r.candidates if (l.tp, l.pp) == (8, 1))
    assert not tp8.fits
    assert r.chosen.step_time_s >= tp8.step_time_s      # the token still visits every layer in turn


def test_data_parallel_multiplies_gpus_and_throughput():
    one = parallel.plan_parallel(parallel.ParallelParams(), calibration=SPEC)
    two = parallel.plan_parallel(parallel.ParallelParams(data_parallel=2), calibration=SPEC)
    assert two.gpus == 2 * one.gpus
    assert two.tokens_per_s_total == pytest.approx(2 * one.tokens_per_s_total)
    assert two.chosen.used_bytes_per_gpu == one.chosen.used_bytes_per_gpu


def test_no_nvlink_falls_back_to_pcie_and_nothing_fits_case():
    r = parallel.plan_parallel(parallel.ParallelParams(gpu="L40S"))
    assert r.chosen.tp == 8
    tiny = parallel.plan_parallel(parallel.ParallelParams(model="llama-3.1-405b", gpu="RTX-4090", max_gpus=8))
    assert tiny.chosen is None and tiny.gpus == 0 and tiny.tokens_per_s_total == 0


@pytest.mark.parametrize("call, match", [
    (lambda: parallel.ParallelParams(users=0), "users must be >= 1"),
    (lambda: parallel.ParallelParams(weight_dtype="int3"), "valid dtypes"),
    (lambda: parallel.ParallelParams(memory_utilisation=1.5), r"memory_utilisation must be in \[0.05, 1.0\]"),
    (lambda: parallel.ParallelParams(reserve_bytes=-1), "reserve_bytes"),
    (lambda: parallel.plan_parallel(parallel.ParallelParams(reserve_bytes=80e9)), "reserve_bytes .* leaves nothing"),
    (lambda: parallel.plan_parallel(parallel.ParallelParams(gpu="TPUv5")), "valid names: H100-SXM"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("graphs", [True, False])
def test_one_gpu_layout_is_the_forward_pass_with_the_same_launch_model(graphs):
    # TP = PP = 1: no communication, so the step is exactly the single-GPU step, eager launch queue included
    r = parallel.plan_parallel(parallel.ParallelParams(model="llama-3.2-1b", cuda_graphs=graphs))
    assert (r.chosen.tp, r.chosen.pp, r.chosen.comm_time_s) == (1, 1, 0.0)
    f = forward.forward_pass("llama-3.2-1b", "H100-SXM", Batch.decode(16, 8192), cuda_graphs=graphs)
    assert r.chosen.step_time_s == pytest.approx(f.time_s, rel=1e-12)


def test_memory_per_gpu_follows_the_kv_budget_convention():
    # Llama 3.1 70B, 16 users x 8,192 tokens, bf16: 320 KiB of cache per token -> exactly 40 GiB in all
    r = parallel.plan_parallel(calibration=SPEC)
    assert r.kv_bytes == 40 * 2 ** 30
    h100 = hardware.get("H100-SXM")
    assert r.device_bytes == 81559 * 2 ** 20                     # as the driver reports an "80 GB" H100
    assert r.limit_bytes_per_gpu == pytest.approx(0.9 * 81559 * 2 ** 20)
    c = r.chosen
    assert c.kv_bytes_per_gpu == 10 * 2 ** 30                    # 8 KV heads split 4 ways
    assert c.reserve_bytes_per_gpu == 2 * 2 ** 30                # sim.kv's activation reserve
    assert c.used_bytes_per_gpu == pytest.approx(r.weight_bytes / 4 + 12 * 2 ** 30)
    tp2 = next(l for l in r.candidates if l.tp == 2)
    assert tp2.used_bytes_per_gpu == pytest.approx(r.weight_bytes / 2 + 22 * 2 ** 30)
    assert not tp2.fits
    assert r.min_gpus_by_memory == -(-(r.weight_bytes + r.kv_bytes) // (0.9 * h100.memory_bytes - 2 * 2 ** 30))


def test_kv_heads_are_replicated_beyond_their_number():
    # Llama 3.1 405B has 8 KV heads: at TP 8 x PP 2 each GPU holds 1/8 of the heads of half the layers
    r = parallel.plan_parallel(parallel.ParallelParams(model="llama-3.1-405b"), calibration=SPEC)
    assert r.chosen.kv_bytes_per_gpu == pytest.approx(r.kv_bytes / 16)
    mha = parallel.plan_parallel(parallel.ParallelParams(model="llama-2-7b", users=1), calibration=SPEC)
    assert [l.kv_bytes_per_gpu * l.tp for l in mha.candidates] == pytest.approx([mha.kv_bytes] * 4)


def test_active_and_total_parameters_of_mixtral():
    # Mixtral 8x7B: 47 B parameters, 13 B used per token (Jiang et al., arXiv 2401.04088)
    r = parallel.plan_parallel(parallel.ParallelParams(model="mixtral-8x7b"), calibration=SPEC)
    assert r.total_params == pytest.approx(46.7e9, rel=0.01)
    assert r.active_params == pytest.approx(12.9e9, rel=0.01)
    assert (r.num_experts, r.experts_per_token) == (8, 2)
    # one expert of one layer: 3 x 4,096 x 14,336 weights at 2 bytes
    assert r.expert_bytes == 3 * 4096 * 14336 * 2


def _mean_distinct_experts_by_enumeration(E, k, tokens):
    """Average number of distinct experts over every routing of `tokens` tokens to k of E experts."""
    import itertools
    subsets = list(itertools.combinations(range(E), k))
    total = n = 0
    for routing in itertools.product(subsets, repeat=tokens):
        total += len(set().union(*routing))
        n += 1
    return total / n


@pytest.mark.parametrize("tokens", [1, 2, 3])
def test_experts_touched_closed_form_matches_enumeration(tokens):
    r = parallel.plan_parallel(parallel.ParallelParams(model="mixtral-8x7b", users=tokens), calibration=SPEC)
    assert r.experts_touched == pytest.approx(_mean_distinct_experts_by_enumeration(8, 2, tokens), rel=1e-12)
    assert r.experts_touched == pytest.approx(8 * (1 - 0.75 ** tokens))     # 2, 3.5, 4.625


def test_experts_touched_curve_reaches_every_expert_and_bytes_follow():
    r = parallel.plan_parallel(parallel.ParallelParams(model="mixtral-8x7b"), calibration=SPEC)
    assert list(r.moe_tokens[:4]) == [1, 2, 4, 8] and r.moe_tokens[-1] == 4096
    assert r.moe_experts_touched[0] == 2 and r.moe_experts_touched[-1] == pytest.approx(8)
    assert all(b >= a for a, b in zip(r.moe_experts_touched, r.moe_experts_touched[1:]))   # saturates at 8
    assert r.moe_experts_touched[3] == pytest.approx(8 * (1 - 0.75 ** 8))              # 8 tokens: 7.2 experts
    assert r.moe_expert_bytes_read[0] == pytest.approx(32 * 2 * r.expert_bytes)   # 32 layers x top-2 experts
    assert r.moe_expert_bytes_read[-1] == pytest.approx(32 * 8 * r.expert_bytes)


def test_expert_parallel_splits_experts_not_matrices():
    r = parallel.plan_parallel(parallel.ParallelParams(model="mixtral-8x7b", users=4), calibration=SPEC)
    assert r.chosen.tp == 2 and r.expert_parallel == 2 and r.experts_per_gpu == 4
    assert r.experts_touched_per_gpu == pytest.approx(4 * (1 - 0.75 ** 4))      # (E / EP) (1 - (1 - k/E)^B)
    assert "uniform top-2 routing" in r.routing_note


def test_dense_model_touches_its_one_mlp():
    r = parallel.plan_parallel(calibration=SPEC)
    assert (r.num_experts, r.experts_touched, r.expert_parallel) == (1, 1.0, 1)
    assert r.total_params == r.active_params and set(r.moe_experts_touched) == {1.0}


def test_data_parallel_keeps_each_users_speed():
    one = parallel.plan_parallel(calibration=SPEC)
    four = parallel.plan_parallel(parallel.ParallelParams(data_parallel=4), calibration=SPEC)
    assert four.chosen.tokens_per_s_per_user == one.chosen.tokens_per_s_per_user
    assert four.min_gpus_by_memory == one.min_gpus_by_memory and four.chosen.tp == one.chosen.tp
