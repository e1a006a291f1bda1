"""Temperature, top-k and top-p."""
from __future__ import annotations

import numpy as np
import pytest

from sim import sampling


def test_softmax_and_temperature():
    z = [2.0, 1.0, 0.0]
    p = sampling.softmax(z)
    assert p == pytest.approx(np.exp(z) / np.exp(z).sum())
    ent = [sampling.entropy_bits(sampling.softmax(z, t)) for t in (0.25, 0.5, 1.0, 2.0, 8.0)]
    assert all(a < b for a, b in zip(ent, ent[1:]))            # low T sharpens, high T flattens
    assert sampling.entropy_bits(sampling.softmax(z, 1e6)) == pytest.approx(np.log2(3), abs=1e-4)
    assert sampling.softmax([1.0, 3.0, 3.0], 0).tolist() == [0.0, 1.0, 0.0]   # greedy, first maximum


def test_top_p_keeps_the_smallest_sufficient_set():
    p = np.array([0.05, 0.5, 0.15, 0.3])
    out, keep = sampling.top_p_filter(p, 0.8)
    assert keep.tolist() == [False, True, False, True]
    assert out == pytest.approx([0, 0.5 / 0.8, 0, 0.3 / 0.8])
    assert sampling.top_p_filter(p, 0.0)[1].sum() == 1
    assert sampling.top_p_filter(p, 1.0)[1].all()
    assert sampling.top_p_filter(p, 0.81)[1].sum() == 3


def test_top_k():
    out, keep = sampling.top_k_filter(np.array([0.1, 0.6, 0.3]), 2)
    assert keep.tolist() == [False, True, True] and out.sum() == pytest.approx(1)


def test_figure_call():
    r = sampling.apply_sampling(sampling.SamplingParams(temperature=0.7, top_p=0.9, samples=5000, seed=2))
    assert r.labels[0] == "mat" and r.kept_count < 10
    assert r.probs_final.sum() == pytest.approx(1) and np.all(r.probs_final[~r.kept] == 0)
    assert r.sampled_counts.sum() == 5000 and np.all(r.sampled_counts[~r.kept] == 0)
    assert r.entropy_bits_final < r.entropy_bits_base
    flat = sampling.apply_sampling(sampling.SamplingParams(temperature=3.0))
    assert flat.entropy_bits_final > r.entropy_bits_base


@pytest.mark.parametrize("call, match", [
    (lambda: sampling.softmax([1.0], -1), "temperature must be >= 0"),
    (lambda: sampling.softmax([]), "non-empty"),
    (lambda: sampling.top_p_filter([0.5, 0.5], 1.5), r"top_p must be in \[0.0, 1.0\]"),
    (lambda: sampling.top_p_filter([0.5, 0.6], 0.5), "summing to 1"),
    (lambda: sampling.SamplingParams(logits=(1.0, 2.0), labels=("a",)), "same length"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
