"""Speculative decoding: expectation, Monte-Carlo, the acceptance rule, speedup vs batch."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim import hardware, kernel_model, speculative

SPEC = kernel_model.spec_sheet(hardware.get("H100-SXM"))


@pytest.mark.parametrize("alpha, k, expected", [
    (0.0, 4, 1.0), (1.0, 4, 5.0), (0.5, 1, 1.5), (0.8, 4, 3.3616), (0.6, 0, 1.0), (1.0, 0, 1.0)])
def test_expected_tokens_closed_form(alpha, k, expected):
    assert speculative.expected_tokens_per_round(alpha, k) == pytest.approx(expected)


def test_expectation_is_the_sum_of_survival_probabilities():
    for a in (0.3, 0.7, 0.95, 0.999999):
        for k in (1, 3, 8):
            assert speculative.expected_tokens_per_round(a, k) == pytest.approx(sum(a ** i for i in range(k + 1)))


def test_monte_carlo_matches_the_formula():
    r = speculative.simulate_rounds(speculative.RoundsParams(alpha=0.7, k=5, rounds=50_000, seed=1))
    se = r.tokens_per_round.std() / np.sqrt(50_000)
    assert abs(r.mean_tokens_per_round - r.expected_tokens_per_round) < 4 * se
    assert np.array_equal(r.tokens_per_round, r.accepted_per_round + 1)
    # outcome rows: accepted ones, then at most one rejection, then unchecked
    for row, acc in zip(r.outcome[:200], r.accepted_per_round[:200]):
        assert list(row[:acc]) == [1] * acc
        if acc < 5:
            assert row[acc] == 0 and all(row[acc + 1:] == -1)


def test_rounds_are_seeded():
    a = speculative.simulate_rounds(speculative.RoundsParams(seed=4))
    b = speculative.simulate_rounds(speculative.RoundsParams(seed=4))
    assert np.array_equal(a.outcome, b.outcome)


dist = st.lists(st.floats(0.0, 1.0), min_size=2, max_size=12).filter(lambda v: sum(v) > 1e-3)


@settings(max_examples=80, deadline=None)
@given(dist, dist)
def test_rejection_rule_preserves_the_target_exactly(p_raw, q_raw):
    n = min(len(p_raw), len(q_raw))
    p = np.array(p_raw[:n]) + 1e-9
    q = np.array(q_raw[:n]) + 1e-9
    p, q = p / p.sum(), q / q.sum()
    out = speculative.output_distribution(p, q)
    np.testing.assert_allclose(out, p, atol=1e-12)
    assert speculative.acceptance_rate(p, q) == pytest.approx(np.minimum(p, q).sum())


def test_rejection_sampling_statistically_matches_the_target():
    r = speculative.demonstrate_rejection_sampling(speculative.RejectionParams(samples=100_000, seed=7))
    counts = r.empirical_output * 100_000
    chi2 = ((counts - 100_000 * r.target) ** 2 / (100_000 * r.target)).sum()
    assert chi2 < 20.5                                   # 99.9th percentile of chi-square with 5 d.o.f.
    assert r.empirical_acceptance_rate == pytest.approx(r.acceptance_rate, abs=0.01)
    # the draft alone would be far off
    assert np.abs(r.draft - r.target).max() > 0.1


def test_single_draws_follow_the_rule():
    rng = np.random.default_rng(0)
    p, q = np.array([0.6, 0.4]), np.array([0.1, 0.9])
    draws = [speculative.rejection_sample(p, q, rng) for _ in range(4000)]
    emitted = np.bincount([d[0] for d in draws], minlength=2) / 4000
    assert emitted == pytest.approx(p, abs=0.03)
    accepted = [d for d in draws if d[2]]
    assert all(d[0] == d[1] for d in accepted)


def test_speedup_falls_as_the_batch_grows():
    r = speculative.speedup_vs_batch(speculative.SpeedupParams(alpha=0.8, k=3, context_tokens=256), calibration=SPEC)
    e = speculative.expected_tokens_per_round(0.8, 3)
    assert 1.5 < r.speedup[0] < e                        # memory-bound: close to E[tokens], minus drafting
    assert r.speedup[-1] < 0.8 * r.speedup[0]            # verifying k + 1 tokens stops being free
    assert r.speedup[r.batch_grid >= 128].max() < r.speedup[r.batch_grid == 32][0]
    assert r.break_even_batch > 64                         # and eventually costs more than it saves
    assert r.round_time_s == pytest.approx(r.draft_time_s + r.verify_time_s)
    free = speculative.speedup_vs_batch(speculative.SpeedupParams(drafter="ngram", context_tokens=256),
                                        calibration=SPEC)
    assert free.speedup[0] > r.speedup[0]                 # a free drafter does better
    assert free.speedup[0] == pytest.approx(free.expected_tokens_per_round, rel=0.05)
    assert list(r.reference_batches) == [1, 4, 16]


def test_a_small_model_drafter():
    r = speculative.speedup_vs_batch(speculative.SpeedupParams(drafter="llama-3.2-1b"), calibration=SPEC)
    assert r.draft_time_s[0] > 0 and r.speedup[0] > 1


@pytest.mark.parametrize("call, match", [
    (lambda: speculative.expected_tokens_per_round(1.2, 3), r"alpha must be in \[0.0, 1.0\]"),
    (lambda: speculative.expected_tokens_per_round(-0.1, 3), r"alpha must be in \[0.0, 1.0\]"),
    (lambda: speculative.expected_tokens_per_round(0.5, -1), "k must be >= 0"),
    (lambda: speculative.output_distribution([0.5, 0.6], [0.5, 0.5]), "must sum to 1"),
    (lambda: speculative.output_distribution([0.5, 0.5], [1.0]), "same length"),
    (lambda: speculative.SpeedupParams(drafter="gpt2"), "valid drafters: eagle, ngram"),
    (lambda: speculative.RoundsParams(alpha=2), "alpha"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
