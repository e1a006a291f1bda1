"""Magnitude pruning and the bytes model of sparse and quantized weights."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from sim import hardware, kernel_model, pruning

SPEC = kernel_model.spec_sheet(hardware.get("A100-80GB"))     # the default GPU, at its datasheet numbers
finite = st.floats(-100, 100, allow_nan=False, allow_infinity=False)


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(np.float64, st.tuples(st.integers(1, 6), st.integers(1, 8).map(lambda n: 4 * n)), elements=finite))
def test_two_four_keeps_the_two_largest_of_every_four(w):
    p = pruning.prune_2_4(w)
    assert pruning.is_2_4_sparse(p)
    g, pg = w.reshape(-1, 4), p.reshape(-1, 4)
    for row, prow in zip(g, pg):
        kept = prow != 0
        assert set(prow[kept]) <= set(row)                               # values are kept, never changed
        dropped = np.abs(row)[prow == 0]
        if kept.any() and dropped.size:
            assert np.abs(prow[kept]).min() >= dropped.max() or np.isclose(np.abs(prow[kept]).min(), dropped.max())
    assert np.abs(p).sum() >= 0.5 * np.abs(w).sum() - 1e-9               # the larger half of the mass stays


@settings(max_examples=40, deadline=None)
@given(hnp.arrays(np.float64, st.integers(1, 300), elements=finite), st.floats(0, 1))
def test_unstructured_pruning_zeroes_exactly_the_smallest(w, sparsity):
    p = pruning.prune_unstructured(w, sparsity)
    k = int(round(sparsity * w.size))
    zeroed = np.flatnonzero((p == 0) & (w != 0))
    assert len(zeroed) <= k and np.count_nonzero(p == 0) >= k
    if k and k < w.size:
        kept = np.abs(w[p != 0])
        assert kept.size == 0 or kept.min() >= np.sort(np.abs(w))[k - 1]


def test_bytes_per_weight_components():
    assert pruning.bytes_per_weight("dense bf16") == 2.0
    assert pruning.bytes_per_weight("4-bit") == 0.5 + 2 / 128
    assert pruning.bytes_per_weight("2:4 bf16") == 1.0 + 0.125              # values + 2-bit index per kept value
    assert pruning.bytes_per_weight("2:4 + 4-bit") == 0.25 + 1 / 128 + 0.125
    assert pruning.bytes_per_weight("4-bit", quant_group_size=32) == 0.5 + 2 / 32


def test_speedup_stack_accounts_for_the_step():
    r = pruning.predict_pruning_speedup(calibration=SPEC)
    parts = (r.linear_weight_time_s + r.head_and_embedding_time_s + r.kv_time_s + r.activation_time_s
             + r.overhead_time_s + r.engine_overhead_s)
    np.testing.assert_allclose(parts, r.step_time_s, rtol=1e-12)
    assert np.all(r.engine_overhead_s == 0)
    assert np.all(r.overhead_time_s >= -1e-12)
    # only the linear weights shrink; the rest of the stack is the same for every variant
    assert np.ptp(r.head_and_embedding_time_s) == 0 and np.ptp(r.kv_time_s) == 0
    assert list(r.weights_only_speedup.round(2)) == [1.0, 3.88, 1.78, 5.22]
    assert np.all(r.predicted_speedup[1:] < r.weights_only_speedup[1:])
    assert r.predicted_speedup[0] == 1.0


def test_long_context_shrinks_the_predicted_gain():
    short = pruning.predict_pruning_speedup(pruning.PruningParams(context_tokens=512), calibration=SPEC)
    long = pruning.predict_pruning_speedup(pruning.PruningParams(context_tokens=65536), calibration=SPEC)
    assert long.predicted_speedup[-1] < short.predicted_speedup[-1]


@pytest.mark.parametrize("call, match", [
    (lambda: pruning.prune_2_4(np.ones((2, 6))), "multiple of 4"),
    (lambda: pruning.prune_unstructured(np.ones(4), 1.5), r"sparsity must be in \[0.0, 1.0\]"),
    (lambda: pruning.bytes_per_weight("1:4"), "valid variants: dense bf16"),
    (lambda: pruning.PruningParams(context_tokens=-1), "context_tokens must be >= 0"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_bytes_closed_form():
    """Only the blocks' linear weights change between variants: the step's bytes differ by exactly
    (linear parameters) x (bytes per weight difference)."""
    from sim import models
    r = pruning.predict_pruning_speedup(calibration=SPEC)
    m = models.get("llama-3.1-8b")
    n_linear = m.num_layers * sum(i * o for i, o in m.linear_shapes().values())
    np.testing.assert_allclose(r.linear_weight_bytes, n_linear * r.bytes_per_weight, rtol=1e-12)
    np.testing.assert_allclose(r.step_bytes[0] - r.step_bytes, r.linear_weight_bytes[0] - r.linear_weight_bytes,
                               rtol=1e-12)
    np.testing.assert_allclose(r.bytes_speedup, r.step_bytes[0] / r.step_bytes)
    assert np.all(r.bytes_speedup[1:] < r.weights_only_speedup[1:])        # the unshrunk bytes dilute the gain


def test_engine_overhead_that_matches_R23():
    """With the per-step overhead the result names, the model gives exactly R23's high and low speedups."""
    r = pruning.predict_pruning_speedup(calibration=SPEC)
    i = r.variants.index(r.measured_variant)
    assert r.measured_variant == "2:4 + 4-bit" and r.measured_speedup_range == (2.1, 3.0)
    for h, s in zip(r.overhead_to_match_s, reversed(r.measured_speedup_range)):
        assert h > 0
        with_h = pruning.predict_pruning_speedup(pruning.PruningParams(engine_overhead_s=h), calibration=SPEC)
        assert with_h.predicted_speedup[i] == pytest.approx(s, rel=1e-12)
        np.testing.assert_allclose(with_h.step_time_s, r.step_time_s + h, rtol=1e-12)
    assert r.overhead_to_match_s[0] < r.overhead_to_match_s[1]             # 3.0x needs less overhead than 2.1x
    assert pruning.overhead_to_match(10.0, 2.0, 3.0) == 2.0 and pruning.overhead_to_match(3.0, 2.0, 3.0) == 0.0


def test_default_gpu_is_one_R23_measured_on():
    r = pruning.predict_pruning_speedup()
    assert "A100" in r.gpu_name and any(g in r.gpu_name for g in pruning.R23_MEASURED_GPUS)
    i = r.variants.index("2:4 + 4-bit")
    assert r.predicted_speedup[i] > r.measured_speedup_range[1]            # the kernel-only model overshoots


def test_bad_engine_overhead():
    with pytest.raises(ValueError, match="engine_overhead_s must be >= 0"):
        pruning.PruningParams(engine_overhead_s=-0.001)
    with pytest.raises(ValueError, match="speedup must be > 1"):
        pruning.overhead_to_match(1.0, 1.0, 1.0)
