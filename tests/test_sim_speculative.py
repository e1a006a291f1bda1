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


@pytest.mark.parametrize("alpha, k", [(0.0, 4), (1.0, 4), (0.7, 3), (0.9, 0)])
def test_round_bookkeeping(alpha, k):
    r = speculative.simulate_rounds(speculative.RoundsParams(alpha=alpha, k=k, rounds=500, seed=3))
    assert r.bonus_total + r.rejected_total == 500
    assert r.accepted_total + r.rejected_total + r.unchecked_total == 500 * k
    assert np.array_equal(r.bonus, r.accepted_per_round == k)
    assert r.running_mean_tokens[-1] == pytest.approx(r.mean_tokens_per_round)
    assert r.cumulative_tokens[-1] == r.tokens_per_round.sum()
    if alpha == 0.0:
        assert r.bonus_total == (500 if k == 0 else 0) and r.mean_tokens_per_round == 1.0
    if alpha == 1.0:
        assert r.bonus_total == 500 and r.mean_tokens_per_round == k + 1 and r.limit_tokens_per_round == np.inf


def test_expectation_curve_approaches_its_limit():
    r = speculative.simulate_rounds(speculative.RoundsParams(alpha=0.8, k=4))
    assert list(r.k_grid) == list(range(11))
    np.testing.assert_allclose(r.expected_by_k, [(1 - 0.8 ** (k + 1)) / 0.2 for k in range(11)])
    assert r.limit_tokens_per_round == pytest.approx(5.0)
    assert r.expected_by_k[4] == pytest.approx(3.3616) and r.expected_by_k[-1] < 5.0


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


@pytest.mark.parametrize("x, dof, sf", [
    (3.841459, 1, 0.05), (6.634897, 1, 0.01), (5.991465, 2, 0.05), (11.070498, 5, 0.05), (20.515006, 5, 0.001),
    (18.307038, 10, 0.05), (0.0, 3, 1.0)])
def test_chi_square_tail_matches_the_tables(x, dof, sf):
    assert speculative.chi_square_sf(x, dof) == pytest.approx(sf, rel=1e-5, abs=1e-12)
    if 0 < sf < 1:
        assert speculative.chi_square_critical(sf, dof) == pytest.approx(x, rel=1e-5)


def test_chi_square_of_the_demo():
    r = speculative.demonstrate_rejection_sampling()
    counts = np.rint(r.empirical_output * r.samples)
    p, q = np.array(speculative.REJECTION_TARGET), np.array(speculative.DRAFT_PRESETS["skewed"])
    assert r.chi_square == pytest.approx(((counts - r.samples * p) ** 2 / (r.samples * p)).sum())
    assert r.chi_square_dof == 5 and r.chi_square_critical == pytest.approx(20.515, abs=1e-3)
    assert r.draft_chi_square == pytest.approx(r.samples * ((q - p) ** 2 / p).sum())
    assert r.chi_square < r.chi_square_critical < r.draft_chi_square


def test_p_values_are_uniform_when_the_rule_holds():
    # 400 seeded runs: about 5% of p-values fall below 0.05 (binomial sd 1.1 points), none is stuck near 0
    for preset in ("far", "close"):
        p = [speculative.demonstrate_rejection_sampling(speculative.RejectionParams(
            draft=speculative.DRAFT_PRESETS[preset], samples=2000, seed=s)).chi_square_p_value for s in range(400)]
        share = np.mean(np.array(p) < 0.05)
        assert 0.017 < share < 0.083, (preset, share)
        assert 0.4 < np.median(p) < 0.6


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
    free = speculative.speedup_vs_batch(speculative.SpeedupParams(drafter="ngram", alpha=0.8, context_tokens=256),
                                        calibration=SPEC)
    assert free.speedup[0] > r.speedup[0]                 # a free drafter does better
    assert free.speedup[0] == pytest.approx(free.expected_tokens_per_round, rel=0.05)
    assert list(r.reference_batches) == [1, 4, 16]


def test_speedup_is_expected_tokens_times_the_step_ratio():
    r = speculative.speedup_vs_batch(speculative.SpeedupParams(drafter="mtp", k=2), calibration=SPEC)
    assert r.alpha == 0.85                                # DeepSeek-V3: 85-90% for its MTP-drafted token
    assert r.expected_tokens_per_round == pytest.approx(1 + 0.85 + 0.85 ** 2)
    np.testing.assert_allclose(r.speedup, r.expected_tokens_per_round * r.baseline_step_time_s
                               / (r.draft_time_s + r.verify_time_s), rtol=1e-12)
    np.testing.assert_allclose(r.speedup_at_reference, r.speedup[np.searchsorted(r.batch_grid, [1, 4, 16])])
    chosen = speculative.speedup_vs_batch(speculative.SpeedupParams(drafter="mtp", k=2, alpha=0.6), calibration=SPEC)
    assert chosen.alpha == 0.6 and "set here to 0.6" in chosen.drafter_note and "DeepSeek-V3" in chosen.drafter_note
    assert np.array_equal(chosen.verify_time_s, r.verify_time_s)      # acceptance changes no step cost


def test_a_draft_layer_weighs_one_decoder_layer_and_the_cache_limits_the_batch():
    from sim import kv
    r = speculative.speedup_vs_batch(speculative.SpeedupParams(drafter="eagle", k=3, context_tokens=1024),
                                     calibration=SPEC)
    h, kvh, ff = 4096, 8 * 128, 14336                    # Llama 3.1 8B: q/o h x h, k/v h x 1024, 3 MLP h x ff
    layer_bytes = 2 * (2 * h * h + 2 * h * kvh + 3 * h * ff) + 2 * 2 * h      # bf16, plus two norm gains
    assert r.drafter_weight_bytes == pytest.approx(layer_bytes, rel=1e-12)
    per_token = kv.kv_bytes_per_token("llama-3.1-8b") * (1 + 1 / 32)          # the head caches one more layer
    budget = kv.kv_budget_bytes("llama-3.1-8b", "H100-SXM") - layer_bytes
    assert r.kv_capacity_batch == int(budget // ((1024 + 3) * per_token))
    free = speculative.speedup_vs_batch(speculative.SpeedupParams(drafter="ngram", k=3), calibration=SPEC)
    assert free.drafter_weight_bytes == 0 and not free.draft_time_s.any()
    assert free.kv_capacity_batch == kv.sequences_that_fit(kv.kv_budget_bytes("llama-3.1-8b", "H100-SXM"),
                                                           "llama-3.1-8b", 1024 + 3)


def test_speedup_at_the_kv_capacity_is_the_curve_there():
    r = speculative.speedup_vs_batch(speculative.SpeedupParams(drafter="llama-3.2-1b"), calibration=SPEC)
    at = speculative.speedup_vs_batch(speculative.SpeedupParams(drafter="llama-3.2-1b", max_batch=r.kv_capacity_batch),
                                      calibration=SPEC)
    assert at.batch_grid[-1] == r.kv_capacity_batch
    assert r.speedup_at_kv_capacity == pytest.approx(at.speedup[-1], rel=1e-12)
    none = speculative.speedup_vs_batch(speculative.SpeedupParams(model="llama-3.1-70b"), calibration=SPEC)
    assert none.kv_capacity_batch == 0 and np.isnan(none.speedup_at_kv_capacity)   # 141 GB of weights on 80 GB


def test_a_small_model_drafter():
    r = speculative.speedup_vs_batch(speculative.SpeedupParams(drafter="llama-3.2-1b"), calibration=SPEC)
    assert r.draft_time_s[0] > 0 and r.speedup[0] > 1


@pytest.mark.parametrize("call, match", [
    (lambda: speculative.expected_tokens_per_round(1.2, 3), r"alpha must be in \[0.0, 1.0\]"),
    (lambda: speculative.expected_tokens_per_round(-0.1, 3), r"alpha must be in \[0.0, 1.0\]"),
    (lambda: speculative.expected_tokens_per_round(0.5, -1), "k must be >= 0"),
    (lambda: speculative.output_distribution([0.5, 0.6], [0.5, 0.5]), "must sum to 1"),
    (lambda: speculative.output_distribution([0.5, 0.5], [1.0]), "same length"),
    (lambda: speculative.SpeedupParams(drafter="gpt2"), "valid drafters: eagle, mtp, ngram"),
    (lambda: speculative.RoundsParams(alpha=2), "alpha"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("kw", [{}, {"drafter": "llama-3.2-1b"}, {"drafter": "ngram", "k": 2}])
def test_speedup_on_the_shared_step_costs_is_the_fresh_numbers(kw):
    # speedup_vs_batch takes the shared StepCost of a shipped calibration (forward.step_cost),
    # whose memo carries over from earlier calls: the numbers must be those of a fresh one
    from sim import forward
    from tests.test_sim_scheduler import same_results

    p = speculative.SpeedupParams(**kw)
    shared = speculative.speedup_vs_batch(p)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(speculative, "step_cost", lambda *a, **k: forward.StepCost(*a, **k))
        fresh = speculative.speedup_vs_batch(p)
    assert same_results(shared, fresh) == []
