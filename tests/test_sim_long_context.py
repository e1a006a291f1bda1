"""sim.long_context (chapter 17): closed forms of the cache, and the step costs equal to the
step model's own for the same work."""
from __future__ import annotations

import math

import numpy as np
import pytest

from sim import forward
from sim.long_context import (METHODS, PREFILL_CHUNK_TOKENS, LongContextParams, layer_groups, long_context,
                              longest_fitting_context, pairs_up_to)
from sim.models import get as get_model

M = get_model("llama-3.1-8b")
ROW = 2 * M.num_kv_heads * M.head_dim * 2          # bytes of K and V, one token, one layer, bf16


@pytest.fixture(scope="module")
def r128():
    return long_context(LongContextParams(context_tokens=131_072, window_tokens=4096, kv_budget_tokens=2048,
                                          global_every=4))


def test_cache_bytes_are_layers_times_kept_tokens(r128):
    c, w, b, L = 131_072, 4096, 2048, M.num_layers
    g = L // 4
    assert r128.kv_bytes_per_seq["full"] == L * c * ROW == 16 * 2 ** 30
    assert r128.kv_bytes_per_seq["fp8"] == L * c * ROW / 2
    assert r128.kv_bytes_per_seq["window"] == L * w * ROW
    assert r128.kv_bytes_per_seq["sinks"] == L * (w + 4) * ROW
    assert r128.kv_bytes_per_seq["evict"] == L * b * ROW
    assert r128.kv_bytes_per_seq["hybrid"] == (g * c + (L - g) * w) * ROW


def test_full_attention_decode_is_the_step_models_decode_step(r128):
    cost = forward.StepCost("llama-3.1-8b", "H100-SXM")
    assert r128.decode_step_s["full"] == pytest.approx(cost.uniform_time_s(1, 1, 131_072, cuda_graphs=True), rel=1e-12)
    # and the curve at each context of the sweep
    for c, t in zip(r128.contexts[::10], r128.decode_curve_s["full"][::10]):
        assert t == pytest.approx(cost.uniform_time_s(1, 1, int(c), cuda_graphs=True), rel=1e-12)


def test_prefill_is_the_sum_of_its_chunks_as_the_step_model_costs_them(r128):
    cost = forward.StepCost("llama-3.1-8b", "H100-SXM")
    total, start, n = 0.0, 0, 131_072
    while start < n:
        size = min(PREFILL_CHUNK_TOKENS, n - start)
        total += cost.time_s([size], [start], logits_seqs=int(start + size == n), cuda_graphs=False)
        start += size
    assert r128.prefill_s["full"] == pytest.approx(total, rel=1e-12)
    assert r128.prefill_s["evict"] == r128.prefill_s["full"]        # eviction comes after a full prefill


def test_a_window_no_shorter_than_the_context_changes_nothing():
    r = long_context(LongContextParams(context_tokens=8192, window_tokens=8192, kv_budget_tokens=8192))
    for method in ("window", "evict"):
        assert r.kv_bytes_per_seq[method] == r.kv_bytes_per_seq["full"]
        assert r.decode_step_s[method] == pytest.approx(r.decode_step_s["full"], rel=1e-12)
    assert r.prefill_s["window"] == pytest.approx(r.prefill_s["full"], rel=1e-12)


def test_pairs_scored_by_a_prompt_match_a_count_of_them():
    for n, keep in [(1, None), (10, None), (10, 3), (5000, 700), (700, 700), (701, 700)]:
        brute = sum(i if keep is None else min(i, keep) for i in range(1, n + 1))
        assert pairs_up_to(n, keep) == brute


def test_windowed_decode_stops_growing_at_the_window_and_full_keeps_growing(r128):
    i = np.searchsorted(r128.contexts, 4096 * 2)
    window, full = r128.decode_curve_s["window"], r128.decode_curve_s["full"]
    assert np.all(np.diff(full) > 0)
    assert np.ptp(window[i:]) == 0.0
    assert full[-1] > 4 * window[-1]


def test_the_crossover_context_is_the_forward_models():
    r = long_context(LongContextParams(batch=16, context_tokens=4096))
    assert r.context_kv_equals_weights == forward.context_where_kv_reads_equal_weights("llama-3.1-8b", batch=16)


def test_longest_fitting_context_is_the_last_whole_token_that_fits(r128):
    room = r128.kv_room_bytes
    full = r128.longest_fit["full"]
    assert full == math.floor(room / (M.num_layers * ROW))
    assert r128.longest_fit["window"] == math.inf
    g = M.num_layers // 4
    hybrid = r128.longest_fit["hybrid"]
    assert hybrid == math.floor((room / ROW - (M.num_layers - g) * 4096) / g)
    groups = layer_groups("hybrid", M.num_layers, r128.params)
    assert longest_fitting_context(groups, ROW, 1, room) == hybrid


@pytest.mark.parametrize("bad, says", [
    (dict(context_tokens=1024, window_tokens=4096), "window_tokens (4,096) is longer than the context"),
    (dict(context_tokens=10 ** 9), "context_tokens must be <="),
    (dict(global_every=33), "global_every must be <= 32"),
    (dict(batch=0), "batch must be >= 1"),
    (dict(model="gpt-5"), "model"),
])
def test_bad_input_is_refused_with_the_fields_name(bad, says):
    with pytest.raises(ValueError, match=None) as err:
        LongContextParams(**bad)
    assert says in str(err.value)


def test_the_figure_says_why_it_did_not_compute_and_keeps_its_plots():
    import widgets

    view = widgets.build("ch17-long-context")
    before = dict(view.sources["curves"].data)
    view.controls["context"].value = 1024                  # under the 4,096-token window
    assert "Not computed: window_tokens (4,096) is longer than the context" in view.readouts["numbers"].object
    assert all(np.array_equal(before[k], view.sources["curves"].data[k]) for k in before)
    view.controls["window"].value = 1024                   # a window that fits: computed again
    assert "Not computed" not in view.readouts["numbers"].object


def test_every_method_is_costed_and_no_method_is_slower_than_full(r128):
    assert set(r128.decode_step_s) == set(METHODS)
    for m in METHODS:
        assert r128.decode_step_s[m] <= r128.decode_step_s["full"] * (1 + 1e-12)
        assert r128.prefill_s[m] <= r128.prefill_s["full"] * (1 + 1e-12)


def test_parallel_prefill_splits_the_prompt_and_its_ring_moves_the_rest_of_the_cache():
    from sim.long_context import parallel_prefill
    from sim.parallel import tensor_parallel_prefill_s

    n = 1_048_576
    one = parallel_prefill("llama-3.1-8b", "H100-SXM", n, 1)
    assert one.context_parallel_s == one.tensor_parallel_s == tensor_parallel_prefill_s("llama-3.1-8b", "H100-SXM", n, 1)
    for gpus in (2, 4, 8):
        r = parallel_prefill("llama-3.1-8b", "H100-SXM", n, gpus)
        assert r.exchange_bytes_per_layer == (gpus - 1) / gpus * n * ROW          # every other GPU's K and V
        assert r.exchange_s_per_layer < r.attention_s_per_layer / 50              # hidden behind the scoring
        # what chapter 17 says: at a million tokens both ways divide the work almost perfectly
        assert one.context_parallel_s / gpus < r.context_parallel_s < 1.05 * one.context_parallel_s / gpus
        assert one.tensor_parallel_s / gpus < r.tensor_parallel_s < 1.10 * one.tensor_parallel_s / gpus
    with pytest.raises(ValueError, match="gpus must be <= 64"):
        parallel_prefill("llama-3.1-8b", "H100-SXM", n, 65)
