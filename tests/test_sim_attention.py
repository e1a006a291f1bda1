"""Attention traffic (naive vs tiled), exactness of the online softmax, split-KV decode."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim import attention, hardware, kernel_model

SPEC = kernel_model.spec_sheet(hardware.get("H100-SXM"))


def test_traffic_formulas():
    N, d = 1024, 64
    assert attention.naive_attention_bytes(N, d, 2) == 2 * (4 * N * d + 4 * N * N)
    assert attention.tiled_attention_bytes(N, d, tile=128, bytes_per_elem=2) == 2 * (2 * N * d + 2 * N * d * 8)
    assert attention.tiled_attention_min_bytes(N, d, 2) == 2 * 4 * N * d
    assert attention.attention_flops(N, d) == 4 * N * N * d


def test_bigger_tiles_reread_less():
    b = [attention.tiled_attention_bytes(8192, 128, tile=t) for t in (64, 128, 256, 512)]
    assert all(x > y for x, y in zip(b, b[1:]))
    # asymptotically naive / tiled = 2 x tile / head_dim
    n = 1 << 20
    assert attention.naive_attention_bytes(n, 128) / attention.tiled_attention_bytes(n, 128, 256) == pytest.approx(
        4.0, rel=0.01)


def test_compare_figure():
    r = attention.compare_flash_attention(attention.FlashParams(seq_len=32768), calibration=SPEC)
    assert r.score_matrix_bytes_at == 2 * 32768 ** 2
    assert np.all(r.naive_bytes > r.tiled_bytes) and np.all(r.tiled_bytes >= r.tiled_min_bytes)
    assert np.all(r.naive_time_s >= r.tiled_time_s) and np.all(r.tiled_time_s >= r.tiled_min_time_s)
    assert r.traffic_ratio_min_at == pytest.approx(1 + 32768 / 128)
    assert r.naive_time_s_at == pytest.approx(r.naive_bytes_at / SPEC.bandwidth_bytes_per_s)   # memory-bound
    assert 32768 in r.seq_len_grid


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 20), st.integers(1, 70), st.integers(1, 16), st.integers(1, 40), st.integers(0, 1000))
def test_tiled_online_softmax_is_exact(nq, nk, d, tile, seed):
    rng = np.random.default_rng(seed)
    q, k, v = rng.normal(size=(nq, d)) * 3, rng.normal(size=(nk, d)) * 3, rng.normal(size=(nk, d))
    np.testing.assert_allclose(attention.attention_tiled(q, k, v, tile), attention.attention_naive(q, k, v),
                               rtol=1e-10, atol=1e-12)


def test_split_kv_decode():
    r = attention.split_kv_decode(attention.SplitKVParams(batch=1, context_tokens=32768), calibration=SPEC)
    assert r.kv_bytes == 2 * 8 * 128 * 32768 * 2
    assert r.sm_occupancy[0] == pytest.approx(8 / 132)
    assert r.best_splits >= 16 and r.speedup_best_vs_unsplit > 5
    busy = attention.split_kv_decode(attention.SplitKVParams(batch=64, context_tokens=32768), calibration=SPEC)
    assert busy.best_splits == 1                                # enough sequences already fill the GPU


@pytest.mark.parametrize("call, match", [
    (lambda: attention.score_matrix_bytes(0), "seq_len must be >= 1"),
    (lambda: attention.tiled_attention_bytes(100, 64, tile=0), "tile must be >= 1"),
    (lambda: attention.FlashParams(max_seq_len=10, min_seq_len=100), "max_seq_len must be >= 100"),
    (lambda: attention.attention_naive(np.ones((2, 3)), np.ones((4, 2)), np.ones((4, 2))), "need q"),
    (lambda: attention.attention_naive(np.ones((2, 2)), np.ones((4, 2)), np.ones((3, 2))), "need q"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_thread_blocks_depend_on_how_heads_are_packed():
    # Llama 3.1 8B, one sequence: 8 blocks when the 4 query heads of a KV group share one, 32 as FlashAttention-2
    packed = attention.split_kv_decode(attention.SplitKVParams(), calibration=SPEC)
    per_q = attention.split_kv_decode(attention.SplitKVParams(blocks_per="query_head"), calibration=SPEC)
    assert packed.work_units[0] == 8 and per_q.work_units[0] == 32
    assert per_q.work_units.tolist() == (4 * packed.work_units).tolist()
    # both read the same cache; with more blocks to start from, fewer splits fill the 132 SMs
    assert per_q.kv_bytes == packed.kv_bytes
    assert (packed.best_splits, per_q.best_splits) == (32, 8)
    assert per_q.speedup_best_vs_unsplit < packed.speedup_best_vs_unsplit
    with pytest.raises(ValueError, match="unknown blocks_per 'warp'; valid values: kv_head, query_head"):
        attention.SplitKVParams(blocks_per="warp")


def test_flash_result_carries_the_floor_at_n_and_the_note():
    r = attention.compare_flash_attention()
    i = list(r.seq_len_grid).index(r.seq_len)
    assert r.tiled_min_bytes_at == r.tiled_min_bytes[i] and r.tiled_min_time_s_at == r.tiled_min_time_s[i]
    assert r.naive_bytes_at / r.tiled_min_bytes_at == r.traffic_ratio_min_at
    assert r.note.startswith("One attention head, head dim 128, bf16 (2 bytes per score)")
    assert attention.compare_flash_attention(attention.FlashParams(heads=4)).note.startswith("4 attention heads")
