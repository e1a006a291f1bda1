"""Speculative decoding: draft k tokens cheaply, verify them in one target pass.

Each round a drafter proposes k tokens; the target model scores all k + 1 positions in
one forward pass and accepts the drafts left to right. With each draft accepted with
probability alpha independently, the tokens a round yields (accepted drafts plus the one
token the target always adds) have expectation (Leviathan et al., ICML 2023)

    E[tokens per round] = (1 - alpha^(k+1)) / (1 - alpha)        (= k + 1 when alpha = 1)

The acceptance rule (Leviathan et al.; Chen et al., arXiv:2302.01318): accept draft x ~ q
with probability min(1, p(x) / q(x)); on rejection sample from the residual
max(0, p - q) / sum(max(0, p - q)). The tokens it emits are distributed exactly as the
target p, and alpha = sum_x min(p(x), q(x)).

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
from sim.forward import step_cost, stored_weight_bytes
from sim.kernel_model import Calibration
from sim.kv import kv_budget_bytes, kv_bytes_per_token
from sim.models import CATALOGUE as MODEL_CATALOGUE
from sim.models import resolve as resolve_model

# Per-user output-throughput gain of EAGLE 3.1 in vLLM by requests in flight (EAGLE, vLLM and
# TorchSpec teams, vLLM blog, May 2026: Kimi K2.6 in NVFP4 on GB200, SPEED-Bench coding).
EAGLE31_REFERENCE_SPEEDUPS = {1: 2.03, 4: 1.71, 16: 1.66}
EAGLE31_REFERENCE_SETUP = "EAGLE 3.1 in vLLM, Kimi K2.6 (NVFP4) on GB200, SPEED-Bench coding"


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


# --------------------------------------------------------------------------------------------
# The acceptance rule
# --------------------------------------------------------------------------------------------

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


def _pair(target, draft) -> tuple:
    p = _as_distribution("target", target)
    q = _as_distribution("draft", draft)
    if p.shape != q.shape:
        raise ValueError("target and draft must have the same length")
    return p, q


def acceptance_rate(target, draft) -> float:
    """alpha = sum_x min(p(x), q(x)): the chance one draft token is accepted.

    >>> acceptance_rate([0.5, 0.5], [0.9, 0.1])
    0.6
    """
    p, q = _pair(target, draft)
    return float(np.minimum(p, q).sum())


def output_distribution(target, draft) -> np.ndarray:
    """Exact distribution of the token the acceptance rule emits for one drafted position.

    P(emit x) = q(x) min(1, p(x)/q(x)) + (1 - alpha) r(x) = min(p, q)(x) + max(0, p - q)(x) = p(x),
    with r the normalised residual max(0, p - q). Returned by enumeration, not assumed.

    >>> output_distribution([0.5, 0.3, 0.2], [0.2, 0.2, 0.6]).round(12).tolist()
    [0.5, 0.3, 0.2]
    """
    p, q = _pair(target, draft)
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
    p, q = _pair(target, draft)
    x = int(rng.choice(len(q), p=q))
    if rng.random() < min(1.0, p[x] / q[x]):
        return x, x, True
    residual = np.maximum(p - q, 0.0)
    return int(rng.choice(len(p), p=residual / residual.sum())), x, False


def chi_square_sf(x: float, dof: int) -> float:
    """P(X >= x) for X chi-square distributed with `dof` (an integer >= 1) degrees of freedom.

    Closed forms of the regularised upper incomplete gamma function at half-integer order:
    even dof = 2m: exp(-x/2) sum_{i<m} (x/2)^i / i!; odd dof = 2m + 1: erfc(sqrt(x/2)) +
    exp(-x/2) sum_{i<m} (x/2)^(i+1/2) / Gamma(i + 3/2).

    >>> round(chi_square_sf(3.841459, 1), 6), round(chi_square_sf(2 * math.log(20), 2), 12)
    (0.05, 0.05)
    """
    check_int("dof", dof, minimum=1)
    if x <= 0:
        return 1.0
    h = x / 2.0
    if dof % 2 == 0:
        terms = [math.exp(i * math.log(h) - h - math.lgamma(i + 1)) for i in range(dof // 2)]
        return min(1.0, math.fsum(terms))
    terms = [math.exp((i + 0.5) * math.log(h) - h - math.lgamma(i + 1.5)) for i in range(dof // 2)]
    return min(1.0, math.erfc(math.sqrt(h)) + math.fsum(terms))


def chi_square_critical(level: float, dof: int) -> float:
    """The x with chi_square_sf(x, dof) = level (bisection to 1e-10 relative).

    >>> round(chi_square_critical(0.001, 5), 3)
    20.515
    """
    check_range("level", level, 1e-12, 1.0)
    lo, hi = 0.0, max(1.0, 2.0 * dof)
    while chi_square_sf(hi, dof) > level:
        hi *= 2.0
    while hi - lo > 1e-10 * hi:
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if chi_square_sf(mid, dof) > level else (lo, mid)
    return (lo + hi) / 2.0


# A fixed target over six tokens and draft distributions of increasing distance from it.
REJECTION_TARGET = (0.40, 0.25, 0.15, 0.10, 0.06, 0.04)
DRAFT_PRESETS = {
    "close": (0.35, 0.25, 0.17, 0.11, 0.07, 0.05),
    "skewed": (0.20, 0.30, 0.10, 0.25, 0.05, 0.10),
    "uniform": (1 / 6,) * 6,
    "far": (0.02, 0.03, 0.05, 0.10, 0.30, 0.50),
}
CHI_SQUARE_LEVEL = 0.001        # significance level of the critical value shown


@checked_params
@dataclass(frozen=True)
class RejectionParams:
    """A target and a draft distribution over a small vocabulary, and a sample count."""

    LIMITS = {"samples": (10_000_000, "samples"), "target": (1.0, ""), "draft": (1.0, "")}

    target: tuple = REJECTION_TARGET
    draft: tuple = DRAFT_PRESETS["skewed"]
    samples: int = 20_000
    seed: int = 0

    def __post_init__(self) -> None:
        _pair(self.target, self.draft)
        check_int("samples", self.samples, minimum=1, maximum=10_000_000)
        check_int("seed", self.seed, minimum=0)


@dataclass(frozen=True)
class RejectionResult:
    """The acceptance rule, exactly and by sampling, and a chi-square test of the samples against the target."""

    target: np.ndarray                  # (vocab,)
    draft: np.ndarray                   # (vocab,)
    exact_output: np.ndarray            # (vocab,) equals target
    empirical_output: np.ndarray        # (vocab,) share of samples emitting each token
    residual: np.ndarray                # (vocab,) normalised max(0, p - q)
    acceptance_rate: float              # sum min(p, q)
    empirical_acceptance_rate: float
    max_abs_error_exact: float          # max |exact_output - target|
    max_abs_error_empirical: float      # max |empirical_output - target|
    samples: int
    chi_square: float                   # sum (observed - n p)^2 / (n p) over tokens with p > 0
    chi_square_dof: int                 # tokens with p > 0, minus 1
    chi_square_p_value: float           # P(chi-square >= statistic) if the samples follow the target
    chi_square_critical: float          # the statistic's CHI_SQUARE_LEVEL critical value
    draft_chi_square: float             # the same statistic for n draws of the draft alone (expected counts)


def demonstrate_rejection_sampling(params: RejectionParams = RejectionParams()) -> RejectionResult:
    """Apply the acceptance rule exactly and `samples` times (vectorised, seeded), and test the samples.

    The chi-square statistic compares the emitted counts with `samples` x target; with the
    rule working it follows a chi-square law with (tokens - 1) degrees of freedom, so its
    p-value is uniform and it exceeds the 0.1% critical value one time in a thousand.
    `draft_chi_square` is what the statistic would be, in expectation of the counts, if the
    drafts were emitted unchecked: n x sum (q - p)^2 / p.

    >>> r = demonstrate_rejection_sampling()
    >>> r.max_abs_error_exact < 1e-12, r.chi_square < r.chi_square_critical < r.draft_chi_square
    (True, True)
    """
    pr = params
    p, q = _pair(pr.target, pr.draft)
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
    counts = np.bincount(emitted, minlength=len(p))
    exact = output_distribution(p, q)
    live = p > 0
    expected = n * p[live]
    chi2 = float(((counts[live] - expected) ** 2 / expected).sum())
    dof = max(int(live.sum()) - 1, 1)
    return RejectionResult(target=p, draft=q, exact_output=exact, empirical_output=counts / n, residual=resid,
                           acceptance_rate=float(np.minimum(p, q).sum()),
                           empirical_acceptance_rate=float(accepted.mean()),
                           max_abs_error_exact=float(np.abs(exact - p).max()),
                           max_abs_error_empirical=float(np.abs(counts / n - p).max()),
                           samples=n, chi_square=chi2, chi_square_dof=dof,
                           chi_square_p_value=chi_square_sf(chi2, dof),
                           chi_square_critical=chi_square_critical(CHI_SQUARE_LEVEL, dof),
                           draft_chi_square=float(n * ((q[live] - p[live]) ** 2 / p[live]).sum()))


# --------------------------------------------------------------------------------------------
# Monte-Carlo rounds
# --------------------------------------------------------------------------------------------

K_MAX_SHOWN = 10                    # the expectation curve is drawn for k = 0 .. max(K_MAX_SHOWN, k)


@checked_params
@dataclass(frozen=True)
class RoundsParams:
    """A run of speculative rounds with a fixed per-token acceptance probability."""

    LIMITS = {"alpha": (1.0, ""), "k": (64, "tokens"), "rounds": (1_000_000, "rounds")}

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
    """Which drafts each round accepted, and how many tokens it yielded."""

    outcome: np.ndarray                 # (rounds, k) 1 accepted, 0 rejected, -1 not checked (after a rejection)
    accepted_per_round: np.ndarray      # (rounds,)
    bonus: np.ndarray                   # (rounds,) True: every draft accepted, the target's extra token is a bonus
    tokens_per_round: np.ndarray        # (rounds,) accepted + 1 (the correction after a rejection, or the bonus)
    cumulative_tokens: np.ndarray       # (rounds,)
    running_mean_tokens: np.ndarray     # (rounds,) mean tokens per round over the first i + 1 rounds
    mean_tokens_per_round: float
    expected_tokens_per_round: float    # the closed form
    accepted_total: int
    rejected_total: int                 # rounds that ended in a rejection
    unchecked_total: int                # drafts after a rejection, thrown away unchecked
    bonus_total: int
    k_grid: np.ndarray                  # (m,) 0 .. max(K_MAX_SHOWN, k)
    expected_by_k: np.ndarray           # (m,) the closed form at each k, same alpha
    limit_tokens_per_round: float       # 1 / (1 - alpha), the bound as k grows (inf at alpha = 1)


def simulate_rounds(params: RoundsParams = RoundsParams()) -> RoundsResult:
    """Seeded Monte-Carlo of speculative rounds: drafts accepted until the first rejection.

    A round whose k drafts are all accepted ends with a bonus token from the target's last
    position; a round with a rejection ends with the target's correction at that position.
    Either way the round yields accepted + 1 tokens.

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
    bonus = accepted == p.k
    cumulative = np.cumsum(tokens)
    k_grid = np.arange(max(K_MAX_SHOWN, p.k) + 1)
    return RoundsResult(outcome=outcome, accepted_per_round=accepted, bonus=bonus, tokens_per_round=tokens,
                        cumulative_tokens=cumulative, running_mean_tokens=cumulative / np.arange(1, p.rounds + 1),
                        mean_tokens_per_round=float(tokens.mean()),
                        expected_tokens_per_round=expected_tokens_per_round(p.alpha, p.k),
                        accepted_total=int(accepted.sum()), rejected_total=int((~bonus).sum()),
                        unchecked_total=int((outcome == -1).sum()), bonus_total=int(bonus.sum()),
                        k_grid=k_grid, expected_by_k=np.array([expected_tokens_per_round(p.alpha, int(k))
                                                               for k in k_grid]),
                        limit_tokens_per_round=1.0 / (1.0 - p.alpha) if p.alpha < 1 else math.inf)


# --------------------------------------------------------------------------------------------
# Speedup vs batch
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Drafter:
    """A way of drafting tokens: what one drafted token costs, and the acceptance it is given by default."""

    label: str
    cost: str                           # "free": no GPU time; "layer": one target-width decoder layer + head
    acceptance: float                   # per-token acceptance used when none is given
    acceptance_source: str
    cost_source: str


DRAFTERS = {
    "eagle": Drafter(
        "EAGLE head", "layer", 0.8,
        "acceptance 0.8 assumed (EAGLE reports 2.7-3.5x lower latency on LLaMA2-Chat 70B; acceptance varies by task)",
        "one decoder layer of the target's width on the target's features, reusing its embedding and output head "
        "(Li et al., EAGLE, 2024)"),
    "mtp": Drafter(
        "MTP module", "layer", 0.85,
        "acceptance 0.85: DeepSeek-V3 measured 85-90% for the token its MTP module drafts (the low end; "
        "deeper drafts reuse the module and are assumed to keep it)",
        "one extra transformer block trained with the model, sharing its embedding and output head "
        "(DeepSeek-V3 technical report, 2024)"),
    "ngram": Drafter(
        "n-gram / prompt lookup", "free", 0.5,
        "acceptance 0.5 assumed: it depends on how much of the answer repeats the prompt (prompt lookup "
        "reports 2-4x on input-grounded tasks such as summarisation and code editing)",
        "string matching against the prompt on the CPU, taken as free on the GPU's timeline"),
}
SMALL_MODEL_ACCEPTANCE = 0.7        # assumed for a catalogue model drafting for a larger sibling
SMALL_MODEL_ACCEPTANCE_SOURCE = ("acceptance 0.7 assumed (Leviathan et al. measured 0.5-0.9 with T5 and GPT-like "
                                 "drafts; it depends on the pair and the task)")


def drafter_acceptance(drafter: str) -> float:
    """The per-token acceptance `drafter` is given when none is chosen (see DRAFTERS).

    >>> drafter_acceptance("mtp"), drafter_acceptance("llama-3.2-1b")
    (0.85, 0.7)
    """
    if drafter in DRAFTERS:
        return DRAFTERS[drafter].acceptance
    resolve_model(drafter)
    return SMALL_MODEL_ACCEPTANCE


@checked_params
@dataclass(frozen=True)
class SpeedupParams:
    """Controls of the speedup-vs-batch curve."""

    LIMITS = {"alpha": (1.0, ""), "k": (64, "tokens")}

    model: str = "llama-3.1-8b"         # target
    gpu: str = "H100-SXM"
    alpha: Optional[float] = None       # per-token acceptance; None: the drafter's (DRAFTERS)
    k: int = 3
    drafter: str = "eagle"              # a DRAFTERS key or a model catalogue name (a small model)
    context_tokens: int = 1024          # cached tokens per sequence
    max_batch: int = 2048
    grid_points: int = 24
    precision: Precision = Precision()
    cuda_graphs: bool = True

    def __post_init__(self) -> None:
        if self.alpha is not None:
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
    alpha: float                        # the acceptance used
    expected_tokens_per_round: float
    speedup: np.ndarray                 # (n,) E[tokens] x baseline / round time
    break_even_batch: float             # first grid batch with speedup < 1 (nan if none)
    kv_capacity_batch: int              # sequences whose caches (target + drafter) fit beside the weights
    speedup_at_kv_capacity: float       # speedup at that batch (interpolated on the grid; nan if none fits)
    drafter_label: str
    drafter_note: str                   # where the drafter's cost and acceptance come from
    drafter_weight_bytes: float         # weights the drafter adds to the GPU
    reference_batches: np.ndarray       # EAGLE 3.1 measurements (requests in flight)
    reference_speedups: np.ndarray
    reference_setup: str
    speedup_at_reference: np.ndarray    # this model's speedup at the reference batches
    calibration_note: str


def _drafter_model(p: SpeedupParams):
    """The network a drafted token runs through (None: free), and its label and note."""
    target = resolve_model(p.model)
    if p.drafter in DRAFTERS:
        d = DRAFTERS[p.drafter]
        if d.cost == "free":
            return None, d
        head = replace(target, name=f"{target.name}-{p.drafter}", display_name=f"{target.display_name} {d.label}",
                       num_layers=1, num_experts=1, experts_per_token=1)
        return head, d
    small = resolve_model(p.drafter)
    return small, Drafter(small.display_name, "model", SMALL_MODEL_ACCEPTANCE, SMALL_MODEL_ACCEPTANCE_SOURCE,
                          f"a full decode step of {small.display_name} per drafted token")


def _drafter_memory(p: SpeedupParams, draft_model) -> tuple:
    """(weight bytes the drafter adds, its KV bytes per token)."""
    if draft_model is None:
        return 0.0, 0.0
    if p.drafter in DRAFTERS:       # one layer: the difference a layer makes, embedding and head shared
        target = resolve_model(p.model)
        two = replace(target, num_layers=2, num_experts=1, experts_per_token=1)
        layer = stored_weight_bytes(two, p.precision) - stored_weight_bytes(draft_model, p.precision)
        return layer, kv_bytes_per_token(draft_model, p.precision.kv_dtype)
    return stored_weight_bytes(draft_model, p.precision), kv_bytes_per_token(draft_model, p.precision.kv_dtype)


def speedup_vs_batch(params: SpeedupParams = SpeedupParams(),
                     calibration: Optional[Calibration] = None) -> SpeedupResult:
    """Speedup = E[tokens per round] x t_decode(B) / (k x t_draft(B) + t_verify(B, k + 1)).

    While decode is memory-bound, verifying k + 1 tokens per sequence costs about one
    decode step, so the speedup approaches E[tokens]; as the batch grows the verify pass
    becomes compute-bound and costs ~(k + 1) decode steps, and speculation stops paying.
    The drafters of DRAFTERS: "ngram" (prompt lookup) is free; "eagle" and "mtp" cost one
    decoder layer of the target's width plus the output head per drafted token; a catalogue
    model costs its own decode step. `kv_capacity_batch` is how many sequences of
    context + k tokens fit (target and drafter caches) in what vLLM's accounting leaves.

    >>> r = speedup_vs_batch()
    >>> bool(r.speedup[0] > 1.5 and r.speedup[-1] < r.speedup[0]), r.alpha
    (True, 0.8)
    """
    p = params
    draft_model, drafter = _drafter_model(p)
    alpha = drafter.acceptance if p.alpha is None else p.alpha
    target = step_cost(p.model, p.gpu, p.precision, calibration, p.cuda_graphs)     # shared when shipped
    draft = None if draft_model is None else step_cost(draft_model, p.gpu, p.precision, calibration, p.cuda_graphs)
    grid = batch_grid(p.max_batch, p.grid_points)
    C = p.context_tokens
    target.prime(tokens=np.concatenate([grid, (p.k + 1) * grid]), logits=np.concatenate([grid, (p.k + 1) * grid]))
    if draft is not None:
        draft.prime(tokens=grid, logits=grid)

    def times(b: int) -> tuple:
        """(plain decode step, verify pass over k + 1 tokens per sequence, k draft steps) at batch b."""
        drafting = 0.0 if draft is None else sum(draft.uniform_time_s(b, 1, C + j) for j in range(p.k))
        # verification scores every drafted position: k + 1 rows of logits per sequence
        verifying = target.uniform_time_s(b, p.k + 1, C, logits_seqs=b * (p.k + 1))
        return target.uniform_time_s(b, 1, C), verifying, drafting

    base, verify, drafting = (np.array(col) for col in zip(*(times(int(b)) for b in grid)))
    e = expected_tokens_per_round(alpha, p.k)
    rnd = drafting + verify
    speed = e * base / rnd
    below = np.nonzero(speed < 1.0)[0]
    weights_added, draft_kv = _drafter_memory(p, draft_model)
    budget = max(kv_budget_bytes(p.model, p.gpu, p.precision) - weights_added, 0.0)
    per_seq = max(C + p.k, 1) * (kv_bytes_per_token(p.model, p.precision.kv_dtype) + draft_kv)
    capacity = int(budget // per_seq)
    at_capacity = times(capacity) if capacity >= 1 else None
    ref_b = np.array(sorted(EAGLE31_REFERENCE_SPEEDUPS))
    return SpeedupResult(
        batch_grid=grid, baseline_step_time_s=base, draft_time_s=drafting, verify_time_s=verify, round_time_s=rnd,
        alpha=float(alpha), expected_tokens_per_round=e, speedup=speed,
        break_even_batch=float(grid[below[0]]) if below.size else math.nan,
        kv_capacity_batch=capacity,
        speedup_at_kv_capacity=(e * at_capacity[0] / (at_capacity[1] + at_capacity[2])
                                if at_capacity else math.nan),
        drafter_label=drafter.label,
        drafter_note=f"{drafter.label}: {drafter.cost_source}; {drafter.acceptance_source}"
                     + ("" if alpha == drafter.acceptance else f"; set here to {alpha:g}"),
        drafter_weight_bytes=weights_added,
        reference_batches=ref_b, reference_speedups=np.array([EAGLE31_REFERENCE_SPEEDUPS[b] for b in ref_b]),
        reference_setup=EAGLE31_REFERENCE_SETUP,
        speedup_at_reference=np.interp(ref_b, grid, speed),
        calibration_note=target.calibration.note)
