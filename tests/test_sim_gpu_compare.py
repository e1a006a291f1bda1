"""The GPUs side by side (sim.gpu_compare): each number is the catalogue's, or the step model's
for the same inputs, and a format runs on the tensor cores a GPU has."""
from __future__ import annotations

import math

import pytest

from sim import hardware
from sim.forward import decode_step, prefill_pass
from sim.gpu_compare import SCHEMES, GpuCompareParams, gpu_compare
from sim.kv import kv_budget_bytes, kv_bytes_per_token
from sim.models import get as get_model
from sim.quant import deployment_precision


def by_name(r):
    return {w.name: w for w in r.rows}


def test_every_catalogue_gpu_in_order_with_its_datasheet_numbers():
    r = gpu_compare()
    assert [w.name for w in r.rows] == hardware.names()
    for w in r.rows:
        g = hardware.get(w.name)
        assert w.dense_flops == dict(g.dense_flops) and w.memory_mib == g.memory_mib
        assert w.ridge_bf16 == g.dense_flops["bf16"] / g.hbm_bandwidth_bytes_per_s
    h = by_name(r)["H100-SXM"]
    assert round(h.ridge_bf16) == 295               # 989 TFLOP/s over 3.35 TB/s (R4)
    assert h.memory_mib == 81_559


@pytest.mark.parametrize("weights, expected", [
    ("bf16", {"H100-SXM": "bf16", "A100-80GB": "bf16", "B200": "bf16"}),
    ("fp8", {"H100-SXM": "fp8", "A100-80GB": "bf16", "L40S": "fp8", "B200": "fp8"}),     # Ampere: no fp8 math
    ("nvfp4", {"H100-SXM": "fp8", "A100-80GB": "bf16", "B200": "fp4"}),                  # fp4 math: Blackwell only
])
def test_a_format_runs_on_the_tensor_cores_the_gpu_has(weights, expected):
    rows = by_name(gpu_compare(GpuCompareParams(weights=weights)))
    assert {n: rows[n].math_dtype for n in expected} == expected
    for n in expected:
        assert rows[n].ridge == hardware.get(n).dense_flops[expected[n]] / hardware.get(n).hbm_bandwidth_bytes_per_s


def test_times_are_the_step_model_s_and_the_batch_the_kv_budget_s():
    p = GpuCompareParams(weights="fp8", context_tokens=16384, prompt_tokens=512, kv_dtype="fp8")
    for w in gpu_compare(p).rows:
        g = hardware.get(w.name)
        prec, _, _ = deployment_precision(SCHEMES["fp8"], g, "weights+activations", "fp8",
                                       get_model("llama-3.1-8b").hidden_size)
        assert w.decode_tokens_per_s == pytest.approx(1 / decode_step("llama-3.1-8b", g, 1, 16384, prec).time_s,
                                                      rel=1e-12)
        assert w.prefill_s == pytest.approx(prefill_pass("llama-3.1-8b", g, 512, 1, prec).time_s, rel=1e-12)
        per_seq = 16384 * kv_bytes_per_token("llama-3.1-8b", "fp8")
        assert w.max_batch == math.floor(kv_budget_bytes("llama-3.1-8b", g, prec) / per_seq)
        assert w.calibration_source in ("trace", "carried-over", "spec-sheet")
    # 8B in bf16 with 4K contexts on an H100: 58.76 GB of KV budget / (4096 x 128 KiB) = 109 sequences
    assert by_name(gpu_compare())["H100-SXM"].max_batch == 109


def test_the_h200_decodes_faster_than_the_h100_and_prefills_alike():
    rows = by_name(gpu_compare())
    h100, h200 = rows["H100-SXM"], rows["H200"]
    assert h200.decode_tokens_per_s > 1.2 * h100.decode_tokens_per_s          # 4.8 against 3.35 TB/s
    assert h200.prefill_s == pytest.approx(h100.prefill_s, rel=0.15)          # the same tensor cores
    assert h200.max_batch > 1.9 * h100.max_batch                              # 143,771 against 81,559 MiB


def test_fp4_speeds_prefill_only_where_there_are_fp4_tensor_cores():
    fp8, fp4 = by_name(gpu_compare(GpuCompareParams(weights="fp8"))), by_name(gpu_compare(GpuCompareParams(weights="nvfp4")))
    assert fp4["H100-SXM"].prefill_s == pytest.approx(fp8["H100-SXM"].prefill_s, rel=0.05)
    assert fp4["B200"].prefill_s < 0.75 * fp8["B200"].prefill_s
    for n in hardware.names():                                   # fewer bytes: decode faster everywhere
        assert fp4[n].decode_tokens_per_s > fp8[n].decode_tokens_per_s


def test_a_model_that_does_not_fit_says_so():
    rows = by_name(gpu_compare(GpuCompareParams(model="llama-3.1-70b")))
    h100 = rows["H100-SXM"]            # 141 GB of bf16 weights against 0.9 x 85.5 GB
    assert not h100.fits and h100.max_batch == 0 and math.isnan(h100.decode_tokens_per_s)
    assert "does not fit" in h100.calibration_note
    assert rows["B200"].fits and rows["B200"].max_batch > 0


@pytest.mark.parametrize("bad, named", [({"weights": "int3"}, "weights"), ({"context_tokens": 0}, "context_tokens"),
                                        ({"prompt_tokens": 2 ** 21}, "prompt_tokens"), ({"model": "gpt-9"}, "model"),
                                        ({"kv_dtype": "int4"}, "kv_dtype")])
def test_bad_input_is_named(bad, named):
    with pytest.raises(ValueError, match=named):
        GpuCompareParams(**bad)
