"""Golden tests: the facts GUIDE_PLAN.md states that a simulation can reproduce.

Each test names the fact and its source; tolerances are stated where the guide says "~".
Model times use the spec-sheet calibration explicitly so that recorded traces (which
move the effective numbers) do not change these closed-form checks.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from sim import (attention, decode, forward, hardware, kernel_model, kv, latency, models, parallel, quant, roofline,
                 speculative)
from sim.batch import Precision

GiB = 2 ** 30
H100 = hardware.get("H100-SXM")
SPEC = kernel_model.spec_sheet(H100)


# ---- Numbers the whole guide rests on ------------------------------------------------------

def test_h100_datasheet_numbers_R4_R30():
    assert H100.peak_flops("bf16") == 989e12            # dense; 1,979 is the sparse figure
    assert H100.peak_flops("fp8") == pytest.approx(2 * H100.peak_flops("bf16"), rel=1e-3)   # 1,979 vs 2 x 989.4
    assert H100.memory_mib == 81_559 and H100.hbm_bandwidth_bytes_per_s == 3.35e12
    assert H100.sm_count == 132
    assert H100.register_file_bytes_per_sm == 256 * 1024 and H100.smem_l1_bytes_per_sm == 256 * 1024
    assert H100.l2_bytes == 50 * 2 ** 20
    assert H100.nvlink_bandwidth_bytes_per_s == 900e9    # ch12: NVLink 900 GB/s


def test_h200_same_compute_more_memory():
    h200 = hardware.get("H200")
    assert h200.memory_mib == 143_771 and h200.hbm_bandwidth_bytes_per_s == 4.8e12
    assert dict(h200.dense_flops) == dict(H100.dense_flops)


def test_a100_sram_vs_hbm_bandwidth_R27():
    r = hardware.memory_hierarchy("A100-80GB")
    smem = r.bandwidth_bytes_per_s[r.levels.index("shared memory / L1")]
    assert smem == pytest.approx(19e12, rel=0.05)        # "about 19 TB/s"
    assert 1.5e12 <= r.bandwidth_bytes_per_s[-1] <= 2.05e12   # "1.5-2.0 TB/s" (2,039 GB/s for the 80 GB SXM)


def test_h100_ridge_point_R4_R31():
    assert roofline.ridge_point("H100-SXM") == pytest.approx(295.2, abs=0.1)   # 989 / 3.35


def test_llama31_8b_shape_R5():
    m = models.get("llama-3.1-8b")
    assert (m.vocab_size, m.hidden_size, m.num_layers, m.num_heads, m.num_kv_heads, m.head_dim,
            m.intermediate_size) == (128256, 4096, 32, 32, 8, 128, 14336)
    b = models.parameter_breakdown(m)
    assert b.total == 8_030_261_248                      # 8.03 B
    assert round(b.total / 1e9, 2) == 8.03


def test_two_flops_per_weight_R3():
    c = roofline.decode_ceiling("llama-3.1-8b", "H100-SXM")
    assert c.flops_per_token == pytest.approx(15e9, rel=0.01)   # ~15 GFLOP per token: 2 per weight multiplied


def test_opening_paradox():
    c = roofline.decode_ceiling("llama-3.1-8b", "H100-SXM")
    assert c.stored_weight_bytes == pytest.approx(16.06e9, rel=1e-3)   # 16.06 GB of bf16 weights stored
    assert c.weight_bytes == pytest.approx(15.01e9, rel=1e-3)          # 15.01 GB read: not the embedding table
    assert c.step_time_s == pytest.approx(4.5e-3, rel=0.01)          # ~4.5 ms per step at 3.35 TB/s
    assert c.tokens_per_s == pytest.approx(223, rel=0.01)            # at most ~220 tokens/s for one user
    assert c.compute_time_s == pytest.approx(15.2e-6, rel=0.01)      # the math takes ~15 us
    assert c.compute_tokens_per_s == pytest.approx(66_000, rel=0.01)  # ~66,000 tokens/s in principle


def test_one_figure_for_the_bytes_of_a_decode_step():
    # the ceiling, the decode meter and the forward pass agree on the bytes of weights a step reads,
    # and the difference from the stored model is exactly the embedding table less the one row gathered
    b = models.parameter_breakdown("llama-3.1-8b")
    c = roofline.decode_ceiling("llama-3.1-8b", "H100-SXM")
    meter = decode.decode_meter(decode.DecodeMeterParams(), calibration=SPEC)
    assert meter.weight_bytes_per_step[0] == c.weight_bytes == forward.decode_weight_bytes("llama-3.1-8b")
    assert c.stored_weight_bytes - c.weight_bytes == 2 * (b.embedding - 4096)
    # a tied head reads the table anyway: Llama 3.2 1B reads its whole embedding through the head
    tied = roofline.decode_ceiling("llama-3.2-1b", "H100-SXM")
    assert tied.stored_weight_bytes - tied.weight_bytes == -2 * 2048


def test_mlp_holds_70_percent_of_llama31_8b():
    b = models.parameter_breakdown("llama-3.1-8b")
    assert b.mlp_per_layer == pytest.approx(176e6, rel=0.01)
    assert b.attention_per_layer == pytest.approx(42e6, rel=0.01)
    assert b.mlp_share == pytest.approx(0.70, abs=0.01)


@pytest.mark.parametrize("batch", [1, 4, 16, 64])
def test_decode_intensity_is_about_the_batch_R3(batch):
    f = forward.decode_step("llama-3.1-8b", "H100-SXM", batch, context_tokens=16, calibration=SPEC)
    assert f.intensity_flop_per_byte == pytest.approx(batch, rel=0.1)


def test_simple_model_efficiencies():
    # the stated default: 80% of peak bandwidth, 60% of peak FLOP/s
    assert SPEC.bandwidth_bytes_per_s == pytest.approx(0.8 * 3.35e12)
    assert SPEC.flops("bf16") == pytest.approx(0.6 * 989e12)


# ---- Chapters ---------------------------------------------------------------------------------

def test_ch00_tensor_cores_well_under_one_percent_for_one_user():
    r = decode.decode_meter(decode.DecodeMeterParams(batch=1), calibration=SPEC)
    assert r.tensor_core_utilisation.max() < 0.01


def test_ch02_first_token_from_prefill_and_phase_bounds_R1_R2():
    r = decode.phase_times(decode.PhaseParams(prompt_tokens=2048, output_tokens=100), calibration=SPEC)
    assert len(r.decode_step_time_s) == 99              # output token 1 comes from the prefill's logits
    assert r.prefill_bound == "compute" and r.decode_bound == "memory"


def test_ch05_tpot_definition_and_mlperf_limits():
    assert latency.tpot_from_e2e(e2e_s=4.5, ttft_s=0.5, output_tokens=201) == pytest.approx(0.02)
    slo = latency.MLPERF_V50_LLAMA2_70B_INTERACTIVE
    assert (slo.ttft_s, slo.tpot_s) == (0.450, 0.040)
    assert latency.reading_speed_tokens_per_s() == pytest.approx(5, rel=0.1)   # ~238 words/min ~ 5 tokens/s


def test_ch06_kv_of_llama31_8b_at_8k_is_exactly_one_gib():
    m = models.get("llama-3.1-8b")
    b = kv.kv_cache_bytes(m.num_layers, m.num_kv_heads, m.head_dim, 8192, batch=1, bytes_per_elem=2)
    assert b == GiB
    assert round(b / 1e9, 2) == 1.07


def test_ch06_sixteen_conversations_outweigh_the_weights():
    r = kv.kv_size(kv.KVSizeParams(model="llama-3.1-8b", context_tokens=8192, batch=16))
    assert r.kv_bytes > r.weight_bytes


def test_ch06_llama31_70b_at_128k_is_40_gib():
    assert kv.kv_cache_bytes(80, 8, 128, 131072) == 40 * GiB


def test_ch06_gqa_cuts_the_cache_4x_R15():
    r = kv.kv_size(kv.KVSizeParams(model="llama-3.1-8b"))
    mha, gqa = r.kv_bytes_by_attention[r.attention_kinds.index("mha")], r.kv_bytes_by_attention[
        r.attention_kinds.index("gqa")]
    assert mha / gqa == 4


def test_ch06_sequences_in_40_gib_bf16_and_fp8():
    assert kv.sequences_that_fit(40 * GiB, "llama-3.1-70b", 4096) == 32
    assert kv.sequences_that_fit(40 * GiB, "llama-3.1-70b", 4096, kv_dtype="fp8") == 64


def test_ch07_block_size_16_and_waste_R6():
    from sim import paging
    assert paging.DEFAULT_BLOCK_SIZE == 16
    r = paging.reservation_waste()
    assert 0.60 <= r.contiguous_waste_fraction <= 0.80    # earlier systems: 60-80% wasted
    assert r.paged_waste_fraction < 0.04                  # paging: under 4%


def test_ch08_score_matrix_at_32k_is_about_2_gb():
    assert attention.score_matrix_bytes(32768) == pytest.approx(2e9, rel=0.1)


def test_ch08_flash_attention_is_exact_R27():
    rng = np.random.default_rng(3)
    q, k, v = rng.normal(size=(64, 32)), rng.normal(size=(300, 32)), rng.normal(size=(300, 32))
    np.testing.assert_allclose(attention.attention_tiled(q, k, v, tile=16), attention.attention_naive(q, k, v),
                               rtol=1e-12, atol=1e-12)


def test_ch09_expected_tokens_formula_R8():
    a, k = 0.7, 5
    assert speculative.expected_tokens_per_round(a, k) == pytest.approx((1 - a ** 6) / (1 - a))
    assert speculative.EAGLE31_REFERENCE_SPEEDUPS == {1: 2.03, 4: 1.71, 16: 1.66}   # R12


def test_ch10_nvfp4_is_4_5_bits_R20():
    assert quant.bits_per_weight(quant.QuantScheme("nvfp4")) == 4.5


def test_ch10_int4_7b_model_is_3_5_gb():
    assert quant.weight_bytes_at(7e9, 4) == 3.5e9


def test_ch11_sparsegpt_60_percent_unstructured_R21():
    from sim import pruning
    w = np.random.default_rng(0).normal(size=(64, 128))
    assert np.mean(pruning.prune_unstructured(w, 0.6) == 0) == pytest.approx(0.6, abs=1 / w.size)


def test_ch11_two_four_doubles_the_math_R22():
    dense = forward.prefill_pass("llama-3.1-8b", "H100-SXM", 8192, calibration=SPEC)
    sparse = forward.prefill_pass("llama-3.1-8b", "H100-SXM", 8192, calibration=SPEC,
                                   precision=Precision(weight_bytes_per_elem=1.125, sparse_2_4=True))
    g_dense = sum(o.compute_time_s * o.count for o in dense.ops if o.kind == "gemm" and o.name != "lm_head")
    g_sparse = sum(o.compute_time_s * o.count for o in sparse.ops if o.kind == "gemm" and o.name != "lm_head")
    assert g_sparse == pytest.approx(g_dense / 2)


def test_ch11_bytes_predict_about_4_9x_but_measured_is_2_1_to_3_R23():
    from sim import pruning
    r = pruning.predict_pruning_speedup(pruning.PruningParams(gpu="H100-SXM"), calibration=SPEC)
    i = r.variants.index("2:4 + 4-bit")
    assert r.weights_only_speedup[i] == pytest.approx(4.9, rel=0.10)   # "~4.9x"
    lo, hi = r.measured_speedup_range
    assert (lo, hi) == (2.1, 3.0)
    assert r.predicted_speedup[i] > hi                     # the bytes model overshoots what was measured


def test_ch12_weights_of_70b_and_405b_in_bf16():
    assert models.weight_bytes("llama-3.1-70b") == pytest.approx(141e9, rel=0.01)
    assert models.weight_bytes("llama-3.1-405b") == pytest.approx(810e9, rel=0.01)


def test_ch12_405b_fp8_fits_one_8_gpu_h100_server_bf16_needs_two():
    assert parallel.plan_parallel(parallel.ParallelParams(model="llama-3.1-405b", weight_dtype="fp8")).gpus == 8
    bf16 = parallel.plan_parallel(parallel.ParallelParams(model="llama-3.1-405b"))
    assert (bf16.chosen.tp, bf16.chosen.pp) == (8, 2)


def test_decode_ceiling_math():
    # the same arithmetic in closed form: bytes / bandwidth and FLOPs / FLOP/s
    c = roofline.decode_ceiling("llama-3.1-8b", "H100-SXM")
    read = 8_030_261_248 - 525_336_576          # every parameter but the embedding table (vocab x hidden)
    assert c.step_time_s == pytest.approx((read * 2 + 2 * 4096) / 3.35e12)   # plus the one row gathered
    assert c.compute_time_s == pytest.approx(2 * (read - 65 * 4096) / 989e12)  # GEMMs: no FLOPs for the norms
    assert math.isclose(c.flops_per_byte, 1.0, rel_tol=1e-4)
