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
    (lambda: parallel.ParallelParams(reserve_fraction=1.0), r"reserve_fraction must be in \[0.0, 0.99\]"),
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
