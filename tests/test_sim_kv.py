"""KV cache size, budget and fit."""
from __future__ import annotations

import numpy as np
import pytest

from sim import decode, forward, hardware, kernel_model, kv, models

SPEC = kernel_model.spec_sheet(hardware.get("H100-SXM"))


def test_formula():
    assert kv.kv_cache_bytes(2, 3, 5, 7, batch=11, bytes_per_elem=1) == 2 * 2 * 3 * 5 * 7 * 11
    assert kv.kv_cache_bytes(32, 8, 128, 100, bytes_per_elem=0.5) == 2 * 32 * 8 * 128 * 100 // 2
    assert kv.kv_cache_bytes(32, 8, 128, 0) == 0
    assert isinstance(kv.kv_cache_bytes(32, 8, 128, 10), int)


def test_bytes_per_token_by_attention_kind():
    assert kv.kv_bytes_per_token("llama-3.1-8b") == 128 * 1024
    assert kv.kv_bytes_per_token("llama-3.1-8b", attention="mha") == 512 * 1024
    assert kv.kv_bytes_per_token("llama-3.1-8b", attention="mqa") == 16 * 1024
    assert kv.kv_bytes_per_token("llama-3.1-8b", "fp8") == 64 * 1024
    assert kv.kv_bytes_per_token("llama-2-7b") == 512 * 1024      # MHA: 32 KV heads
    assert kv.kv_bytes_per_token("llama-2-7b", attention="gqa") == 128 * 1024


def test_kv_size_result():
    r = kv.kv_size(kv.KVSizeParams(context_tokens=8192, batch=3, kv_dtype="fp8"))
    assert r.kv_bytes == 3 * 2 ** 29
    assert r.kv_heads == 8
    assert r.context_grid_tokens[-1] == 131072
    assert r.kv_bytes_grid[-1] == 131072 * 64 * 1024 * 3
    assert r.batch_where_kv_exceeds_weights == 30        # fp8 halves the cache: 16.06 GB / 0.537 GB -> 30


def test_fifteen_conversations_already_exceed_the_weights():
    # 15 x 1.0737 GB = 16.1 GB > 16.06 GB of bf16 weights (the guide says "sixteen", which is also true)
    r = kv.kv_size(kv.KVSizeParams(context_tokens=8192))
    assert r.batch_where_kv_exceeds_weights == 15
    assert 14 * r.kv_bytes < r.weight_bytes < 15 * r.kv_bytes


def test_sequences_that_fit_with_blocks():
    per_token = kv.kv_bytes_per_token("llama-3.1-8b")
    assert kv.sequences_that_fit(100 * per_token, "llama-3.1-8b", 33) == 3
    assert kv.sequences_that_fit(100 * per_token, "llama-3.1-8b", 33, block_size=16) == 2   # 48 tokens each
    assert kv.sequences_that_fit(0, "llama-3.1-8b", 33) == 0


def test_budget_accounting_and_step_time_growth():
    r = kv.kv_budget(kv.KVBudgetParams(context_tokens=4096), calibration=SPEC)
    # vLLM's accounting on the driver-reported 81,559 MiB, less the stated activation reserve
    assert r.device_bytes == 81_559 * 2 ** 20
    assert r.budget_bytes == pytest.approx(0.9 * 81_559 * 2 ** 20 - models.weight_bytes("llama-3.1-8b") - 2 * 2 ** 30)
    assert r.max_sequences == 109 and round(r.budget_bytes / 1e9, 1) == 58.8
    assert r.max_sequences == int(r.budget_bytes // (4096 * 128 * 1024))
    assert r.batch_grid[-1] == r.max_sequences
    assert np.all(np.diff(r.step_time_s) > 0)
    assert np.all(np.diff(r.kv_share_of_reads) > 0)
    # cache reads equal weight reads at B = weights / (KV per sequence per step)
    b_eq = r.batch_where_kv_reads_equal_weights
    assert 20 < b_eq < 35
    i = np.searchsorted(r.batch_grid, b_eq)
    assert r.kv_share_of_reads[i - 1] < 0.5 <= r.kv_share_of_reads[i]
    f = forward.decode_step("llama-3.1-8b", "H100-SXM", int(r.batch_grid[-1]), 4096, calibration=SPEC)
    assert r.step_time_s[-1] == pytest.approx(f.time_s)


def test_explicit_budget_and_weights_too_big():
    r = kv.kv_budget(kv.KVBudgetParams(budget_bytes=40 * 2 ** 30, model="llama-3.1-70b", gpu="H200",
                                       context_tokens=4096, block_size=16), calibration=None)
    assert r.max_sequences == 32
    r = kv.kv_budget(kv.KVBudgetParams(model="llama-3.1-70b", gpu="RTX-4090"))
    assert r.budget_bytes == 0 and r.max_sequences == 0 and len(r.batch_grid) == 1


@pytest.mark.parametrize("call, match", [
    (lambda: kv.kv_cache_bytes(-1, 8, 128, 10), "layers must be >= 1"),
    (lambda: kv.kv_cache_bytes(32, 8, 128, -10), "seq_len must be >= 0"),
    (lambda: kv.kv_cache_bytes(32, 8, 128, 10, bytes_per_elem=0), "bytes_per_elem must be > 0"),
    (lambda: kv.kv_cache_bytes(32, 8, 128.5, 10), "head_dim must be an integer"),
    (lambda: kv.kv_bytes_per_token("llama-3.1-8b", attention="mla"), "valid attention kinds: model, mha"),
    (lambda: kv.sequences_that_fit(-1, "llama-3.1-8b", 10), "budget_bytes must be >= 0"),
    (lambda: kv.KVSizeParams(kv_dtype="fp6"), "valid dtypes"),
    (lambda: kv.KVBudgetParams(memory_utilisation=1.5), r"memory_utilisation must be in \[0.0, 1.0\]"),
    (lambda: kv.KVBudgetParams(reserve_bytes=-1), "reserve_bytes must be >= 0"),
    (lambda: kv.kv_budget_bytes("llama-3.1-8b", "H100-SXM", reserve_bytes=float("nan")), "reserve_bytes must be finite"),
    (lambda: kv.context_where_kv_reads_equal_weights("llama-3.1-8b", batch=0), "batch must be >= 1"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_decode_step_grows_with_context_past_the_crossover():
    # Llama 3.1 8B on an H100, one user: the cache reads equal the 15.01 GB of weights at 114,516 tokens
    c_eq = kv.context_where_kv_reads_equal_weights("llama-3.1-8b")
    assert c_eq == pytest.approx(15_009_857_536 / (128 * 1024))
    f = forward.decode_step("llama-3.1-8b", "H100-SXM", 1, round(c_eq), calibration=SPEC)
    assert f.kv_bytes == pytest.approx(f.weight_bytes, rel=1e-4)
    # so the time per output token is not independent of the context: about 5.7 ms at 1K, 12 ms at 128K
    short = decode.phase_times(decode.PhaseParams(prompt_tokens=1024), calibration=SPEC)
    long = decode.phase_times(decode.PhaseParams(prompt_tokens=131072), calibration=SPEC)
    assert short.time_per_output_token_s == pytest.approx(5.7e-3, rel=0.02)
    assert long.time_per_output_token_s == pytest.approx(12.0e-3, rel=0.02)
    # nearly flat well below the crossover (8K adds under 7%), in proportion to the bytes beyond it
    mid = decode.phase_times(decode.PhaseParams(prompt_tokens=8192), calibration=SPEC)
    assert mid.time_per_output_token_s < 1.07 * short.time_per_output_token_s
    # sixteen users share the weight reads, so the crossover comes 16 times sooner
    assert kv.context_where_kv_reads_equal_weights("llama-3.1-8b", batch=16) == pytest.approx(c_eq / 16, rel=1e-4)


def test_kv_size_carries_the_heads_and_note_the_figure_prints():
    r = kv.kv_size()                                     # Llama 3.1 8B: 32 query heads, 8 KV heads of 128
    assert dict(zip(r.attention_kinds, r.kv_heads_by_attention)) == {"mha": 32, "gqa": 8, "mqa": 1}
    assert r.query_heads == 32
    assert r.note.startswith("Llama 3.1 8B: 32 layers, 32 query heads, 8 KV heads of 128")
    assert "weights in bf16" in kv.kv_size(kv.KVSizeParams()).note
    assert "weights in fp8" in kv.kv_size(kv.KVSizeParams(weight_dtype="fp8")).note
