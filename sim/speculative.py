"""Speculative decoding: draft k tokens cheaply, verify them in one target pass.

Each round a drafter proposes k tokens; the target model scores all k + 1 positions in
one forward pass and accepts the drafts left to right. With each draft accepted with
probability alpha independently, the tokens a round yields (accepted drafts plus the one
token the target always adds) have expectation (R8)

    E[tokens per round] = (1 - alpha^(k+1)) / (1 - alpha)        (= k + 1 when alpha = 1)

The acceptance rule (R8, R9): accept draft x ~ q with probability min(1, p(x) / q(x));
on rejection sample from the residual max(0, p - q) / sum(max(0, p - q)). The tokens it
emits are distributed exactly as the target p, and alpha = sum_x min(p(x), q(x)).

>>> expected_tokens_per_round(0.8, 4)
3.3616
>>> expected_tokens_per_round(1.0, 4)
5.0
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Optional

import numpy as np

from sim.batch import Precision
from sim.batching import batch_grid
from sim.checks import check_int, check_range, checked_params
from sim.forward import StepCost
from sim.kernel_model import Calibration
from sim.models import CATALOGUE as MODEL_CATALOGUE
from sim.models import resolve as resolve_model

DRAFTERS = ("eagle", "ngram")      # or any model catalogue name
EAGLE31_REFERENCE_SPEEDUPS = {1: 2.03, 4: 1.71, 16: 1.66}   # R12: per-user throughput gain by requests in flight


def expected_tokens_per_round(alpha: float, k: int) -> float:
    """Expected tokens one speculative round yields: (1 - alpha^(k+1)) / (1 - alpha); k + 1 at alpha = 1.

    `alpha` is the per-token acceptance probability in [0, 1], `k` the number of drafted
    tokens (k = 0 is plain decoding: one token per round).

    >>> expected_tokens_per_round(0.5, 2)     # 1 + 0.5 + 0.25
    1.75
    """
    a = check_range("alpha", alpha, 0.0, 1.0)
    check_int("k", k, minimum=0)
    if a == 1.0:
        return float(k + 1)
    return (1.0 - a ** (k + 1)) / (1.0 - a)


def _as_distribution(name: str, x) -> np.ndarray:
    v = np.asarray(x, dtype=float)
    if v.ndim != 1 or v.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D probability vector")
    if np.any(~np.isfinite(v)) or np.any(v < 0):
        raise ValueError(f"{name} must hold finite non-negative probabilities")
    s = v.sum()
    if not abs(s - 1.0) < 1e-9:
        raise ValueError(f"{name} must sum to 1, sums to {s}")
    return v


def acceptance_rate(target, draft) -> float:
    """alpha = sum_x min(p(x), q(x)): the chance one draft token is accepted (R8).

    >>> acceptance_rate([0.5, 0.5], [0.9, 0.1])
    0.6
    """
    p = _as_distribution("target", target)
    q = _as_distribution("draft", draft)
    if p.shape != q.shape:
        raise ValueError("target and draft must have the same length")
    return float(np.minimum(p, q).sum())


def output_distribution(target, draft) -> np.ndarray:
    """Exact distribution of the token the acceptance rule emits for one drafted position.

    P(emit x) = q(x) min(1, p(x)/q(x)) + (1 - alpha) r(x) = min(p, q)(x) + max(0, p - q)(x) = p(x),
    with r the normalised residual max(0, p - q). Returned by enumeration, not assumed.

    >>> output_distribution([0.5, 0.3, 0.2], [0.2, 0.2, 0.6]).round(12).tolist()
    [0.5, 0.3, 0.2]
    """
    p = _as_distribution("target", target)
    q = _as_distribution("draft", draft)
    if p.shape != q.shape:
        raise ValueError("target and draft must have the same length")
    with np.errstate(divide="ignore", invalid="ignore"):
        accept = np.where(q > 0, np.minimum(1.0, p / np.where(q > 0, q, 1.0)), 0.0)
    accepted_mass = q * accept
    reject = 1.0 - accepted_mass.sum()
    residual = np.maximum(p - q, 0.0)
    total = residual.sum()
    resid = residual / total if total > 0 else np.zeros_like(p)
    return accepted_mass + reject * resid


def rejection_sample(target, draft, rng: np.random.Generator) -> tuple:
    """One drafted position: draw x ~ draft, accept with min(1, p/q), else draw from the residual.

    Returns (emitted token index, drafted token index, accepted?).

    >>> rejection_sample([1.0, 0.0], [0.5, 0.5], np.random.default_rng(0))[0]   # the target only allows token 0
    0
    """
    p = _as_distribution("target", target)
    q = _as_distribution("draft", draft)
    if p.shape != q.shape:
        raise ValueError("target and draft must have the same length")
    x = int(rng.choice(len(q), p=q))
    if rng.random() < min(1.0, p[x] / q[x]):
        return x, x, True
    residual = np.maximum(p - q, 0.0)
    return int(rng.choice(len(p), p=residual / residual.sum())), x, False


@checked_params
@dataclass(frozen=True)
class RejectionParams:
    """A target and a draft distribution over a small vocabulary, and a sample count."""

    target: tuple = (0.40, 0.25, 0.15, 0.10, 0.06, 0.04)
    draft: tuple = (0.20, 0.30, 0.10, 0.25, 0.05, 0.10)
    samples: int = 20_000
    seed: int = 0

    def __post_init__(self) -> None:
        _as_distribution("target", self.target)
        _as_distribution("draft", self.draft)
        if len(self.target) != len(self.draft):
            raise ValueError("target and draft must have the same length")
        check_int("samples", self.samples, minimum=1, maximum=10_000_000)
        check_int("seed", self.seed, minimum=0)


@dataclass(frozen=True)
class RejectionResult:
    """The acceptance rule, exactly and by sampling."""

    target: np.ndarray                  # (vocab,)
    draft: np.ndarray                   # (vocab,)
    exact_output: np.ndarray            # (vocab,) equals target
    empirical_output: np.ndarray        # (vocab,) share of samples emitting each token
    residual: np.ndarray                # (vocab,) normalised max(0, p - q)
    acceptance_rate: float              # sum min(p, q)
    empirical_acceptance_rate: float
    max_abs_error_exact: float          # max |exact_output - target|
    max_abs_error_empirical: float      # max |empirical_output - target|


def demonstrate_rejection_sampling(params: RejectionParams = RejectionParams()) -> RejectionResult:
    """Apply the acceptance rule exactly and `samples` times (vectorised, seeded).

    >>> r = demonstrate_rejection_sampling()
    >>> r.max_abs_error_exact < 1e-12, r.max_abs_error_empirical < 0.02
    (True, True)
    """
    pr = params
    p = np.asarray(pr.target, dtype=float)
    q = np.asarray(pr.draft, dtype=float)
    rng = np.random.default_rng(pr.seed)
    n = pr.samples
    cq = np.cumsum(q)
    drafts = np.minimum(np.searchsorted(cq, rng.random(n) * cq[-1], side="right"), len(q) - 1)
    ratio = np.minimum(1.0, p[drafts] / q[drafts])
    accepted = rng.random(n) < ratio
    residual = np.maximum(p - q, 0.0)
    resid = residual / residual.sum() if residual.sum() > 0 else p.copy()
    cr = np.cumsum(resid)
    fallback = np.minimum(np.searchsorted(cr, rng.random(n) * cr[-1], side="right"), len(p) - 1)
    emitted = np.where(accepted, drafts, fallback)
    emp = np.bincount(emitted, minlength=len(p)) / n
    exact = output_distribution(p, q)
    return RejectionResult(target=p, draft=q, exact_output=exact, empirical_output=emp, residual=resid,
                           acceptance_rate=float(np.minimum(p, q).sum()),
                           empirical_acceptance_rate=float(accepted.mean()),
                           max_abs_error_exact=float(np.abs(exact - p).max()),
                           max_abs_error_empirical=float(np.abs(emp - p).max()))


# --------------------------------------------------------------------------------------------
# Monte-Carlo rounds
# --------------------------------------------------------------------------------------------

@checked_params
@dataclass(frozen=True)
class RoundsParams:
    """A run of speculative rounds with a fixed per-token acceptance probability."""

    alpha: float = 0.8                  # per-token acceptance probability
    k: int = 4                          # drafted tokens per round
    rounds: int = 50
    seed: int = 0

    def __post_init__(self) -> None:
        check_range("alpha", self.alpha, 0.0, 1.0)
        check_int("k", self.k, minimum=0, maximum=64)
        check_int("rounds", self.rounds, minimum=1, maximum=1_000_000)
        check_int("seed", self.seed, minimum=0)


@dataclass(frozen=True)
class RoundsResult:
    """Which drafts each round accepted and how many tokens it yielded."""

    outcome: np.ndarray                 # (rounds, k) 1 accepted, 0 rejected, -1 not checked (after a rejection)
    accepted_per_round: np.ndarray      # (rounds,)
    tokens_per_round: np.ndarray        # (rounds,) accepted + 1
    cumulative_tokens: np.ndarray       # (rounds,)
    mean_tokens_per_round: float
    expected_tokens_per_round: float    # the closed form


def simulate_rounds(params: RoundsParams = RoundsParams()) -> RoundsResult:
    """Seeded Monte-Carlo of speculative rounds: drafts accepted until the first rejection.

    >>> r = simulate_rounds(RoundsParams(rounds=20_000))
    >>> abs(r.mean_tokens_per_round - r.expected_tokens_per_round) < 0.05
    True
    """
    p = params
    rng = np.random.default_rng(p.seed)
    draws = rng.random((p.rounds, p.k)) < p.alpha
    # accepted = length of the leading run of accepted drafts
    accepted = np.cumprod(draws, axis=1).sum(axis=1) if p.k else np.zeros(p.rounds, dtype=np.int64)
    cols = np.arange(p.k)[None, :]
    outcome = np.where(cols < accepted[:, None], 1, np.where(cols == accepted[:, None], 0, -1)).astype(np.int8)
    tokens = accepted + 1
    return RoundsResult(outcome=outcome, accepted_per_round=accepted, tokens_per_round=tokens,
                        cumulative_tokens=np.cumsum(tokens), mean_tokens_per_round=float(tokens.mean()),
                        expected_tokens_per_round=expected_tokens_per_round(p.alpha, p.k))


# --------------------------------------------------------------------------------------------
# Speedup vs batch size
# --------------------------------------------------------------------------------------------

@checked_params
@dataclass(frozen=True)
class SpeedupParams:
    """Controls of the speedup-vs-batch curve."""

    model: str = "llama-3.1-8b"         # target
    gpu: str = "H100-SXM"
    alpha: float = 0.8
    k: int = 3
    drafter: str = "eagle"              # "eagle" | "ngram" | a model catalogue name
    context_tokens: int = 1024          # cached tokens per sequence
    max_batch: int = 512
    grid_points: int = 24
    precision: Precision = Precision()
    cuda_graphs: bool = True

    def __post_init__(self) -> None:
        check_range("alpha", self.alpha, 0.0, 1.0)
        check_int("k", self.k, minimum=0, maximum=64)
        if self.drafter not in DRAFTERS and self.drafter not in MODEL_CATALOGUE:
            raise ValueError(f"unknown drafter {self.drafter!r}; valid drafters: "
                             f"{', '.join(list(DRAFTERS) + list(MODEL_CATALOGUE))}")
        check_int("context_tokens", self.context_tokens, minimum=0)
        check_int("max_batch", self.max_batch, minimum=1)
        check_int("grid_points", self.grid_points, minimum=2)


@dataclass(frozen=True)
class SpeedupResult:
    """Per-user speedup of speculative decoding over plain decoding at each batch size."""

    batch_grid: np.ndarray              # (n,)
    baseline_step_time_s: np.ndarray    # (n,) one plain decode step
    draft_time_s: np.ndarray            # (n,) k draft steps
    verify_time_s: np.ndarray           # (n,) one target pass over k + 1 tokens per sequence
    round_time_s: np.ndarray            # (n,) draft + verify
    expected_tokens_per_round: float
    speedup: np.ndarray                 # (n,) E[tokens] x baseline / round time
    break_even_batch: float             # first grid batch with speedup < 1 (nan if none)
    reference_batches: np.ndarray       # R12 measurements (EAGLE 3.1 in vLLM)
    reference_speedups: np.ndarray
    calibration_note: str


def _drafter_cost(p: SpeedupParams, calibration: Optional[Calibration]) -> Optional[StepCost]:
    target = resolve_model(p.model)
    if p.drafter == "ngram":
        return None
    if p.drafter == "eagle":
        # R10: the EAGLE draft head is one decoder layer of the target's width, reusing its embedding and head
        head = replace(target, name=target.name + "-eagle", display_name=target.display_name + " EAGLE head",
                       num_layers=1, num_experts=1, experts_per_token=1)
        return StepCost(head, p.gpu, p.precision, calibration, p.cuda_graphs)
    return StepCost(p.drafter, p.gpu, p.precision, calibration, p.cuda_graphs)


def speedup_vs_batch(params: SpeedupParams = SpeedupParams(),
                     calibration: Optional[Calibration] = None) -> SpeedupResult:
    """Speedup = E[tokens per round] x t_decode(B) / (k x t_draft(B) + t_verify(B, k + 1)).

    While decode is memory-bound, verifying k + 1 tokens per sequence costs about one
    decode step, so the speedup approaches E[tokens]; as the batch grows the verify pass
    becomes compute-bound and costs ~(k + 1) decode steps, and speculation stops paying.
    An "ngram" drafter (prompt lookup) is free; "eagle" costs one decoder layer plus the
    output head per drafted token; a catalogue model costs its own decode step.

    >>> r = speedup_vs_batch()
    >>> bool(r.speedup[0] > 1.5 and r.speedup[-1] < r.speedup[0])
    True
    """
    p = params
    target = StepCost(p.model, p.gpu, p.precision, calibration, p.cuda_graphs)
    draft = _drafter_cost(p, target.calibration)
    grid = batch_grid(p.max_batch, p.grid_points)
    C = p.context_tokens
    target.prime(tokens=np.concatenate([grid, (p.k + 1) * grid]), logits=np.concatenate([grid, (p.k + 1) * grid]))
    if draft is not None:
        draft.prime(tokens=grid, logits=grid)
    base = np.array([target.uniform_time_s(int(b), 1, C) for b in grid])
    # verification scores every drafted position: k + 1 rows of logits per sequence
    verify = np.array([target.uniform_time_s(int(b), p.k + 1, C, logits_seqs=int(b) * (p.k + 1)) for b in grid])
    if draft is None or p.k == 0:
        drafting = np.zeros(len(grid))
    else:
        drafting = np.array([sum(draft.uniform_time_s(int(b), 1, C + j) for j in range(p.k)) for b in grid])
    e = expected_tokens_per_round(p.alpha, p.k)
    rnd = drafting + verify
    speed = e * base / rnd
    below = np.nonzero(speed < 1.0)[0]
    ref_b = np.array(sorted(EAGLE31_REFERENCE_SPEEDUPS))
    return SpeedupResult(
        batch_grid=grid, baseline_step_time_s=base, draft_time_s=drafting, verify_time_s=verify, round_time_s=rnd,
        expected_tokens_per_round=e, speedup=speed,
        break_even_batch=float(grid[below[0]]) if below.size else math.nan,
        reference_batches=ref_b, reference_speedups=np.array([EAGLE31_REFERENCE_SPEEDUPS[b] for b in ref_b]),
        calibration_note=target.calibration.note)
