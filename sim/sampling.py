"""Turning logits into the next token: temperature, top-k and top-p (nucleus) sampling.

p_i = exp(z_i / T) / sum_j exp(z_j / T). A temperature below 1 sharpens the distribution,
above 1 flattens it, and T = 0 means greedy decoding (all mass on the largest logit).
Top-p keeps the smallest set of most likely tokens whose probabilities add up to at
least p, drops the tail and renormalises; top-k keeps the k most likely.

>>> softmax([2.0, 1.0, 0.0], temperature=0).tolist()
[1.0, 0.0, 0.0]
>>> top_p_filter([0.5, 0.3, 0.15, 0.05], 0.8)[1].tolist()
[True, True, False, False]
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.checks import check_int, check_non_negative, check_range, checked_params


def _logits(x) -> np.ndarray:
    z = np.asarray(x, dtype=np.float64)
    if z.ndim != 1 or z.size == 0:
        raise ValueError("logits must be a non-empty 1-D vector")
    if not np.all(np.isfinite(z)):
        raise ValueError("logits must be finite")
    return z


def softmax(logits, temperature: float = 1.0) -> np.ndarray:
    """Probabilities from logits at `temperature` (>= 0; 0 = greedy, ties to the first maximum).

    >>> softmax([0.0, 0.0]).tolist(), softmax([0.0, 1.0], temperature=0).tolist()
    ([0.5, 0.5], [0.0, 1.0])
    """
    z = _logits(logits)
    t = check_non_negative("temperature", temperature)
    if t == 0:
        out = np.zeros_like(z)
        out[int(np.argmax(z))] = 1.0
        return out
    e = np.exp((z - z.max()) / t)
    return e / e.sum()


def _probs(x) -> np.ndarray:
    p = np.asarray(x, dtype=np.float64)
    if p.ndim != 1 or p.size == 0 or np.any(~np.isfinite(p)) or np.any(p < 0) or not abs(p.sum() - 1) < 1e-9:
        raise ValueError("probabilities must be a non-empty 1-D vector of non-negative values summing to 1")
    return p


def top_p_filter(probs, top_p: float) -> tuple:
    """Keep the smallest most-likely set with cumulative probability >= top_p (at least one token).

    Returns (renormalised probabilities, kept mask). Ties in probability keep the
    lower index first. top_p = 1 keeps every token with non-zero probability.

    >>> top_p_filter([0.1, 0.6, 0.3], 0.7)[0].round(4).tolist()
    [0.0, 0.6667, 0.3333]
    """
    p = _probs(probs)
    top = check_range("top_p", top_p, 0.0, 1.0)
    order = np.argsort(-p, kind="stable")
    cum = np.cumsum(p[order])
    n_keep = int(np.searchsorted(cum, top - 1e-12, side="left")) + 1
    n_keep = min(max(n_keep, 1), p.size)
    keep = np.zeros(p.size, dtype=bool)
    keep[order[:n_keep]] = True
    keep &= p > 0
    if not keep.any():
        keep[order[0]] = True
    out = np.where(keep, p, 0.0)
    return out / out.sum(), keep


def top_k_filter(probs, k: int) -> tuple:
    """Keep the `k` most likely tokens (k = 0: all). Returns (renormalised probabilities, kept mask).

    >>> top_k_filter([0.1, 0.6, 0.3], 1)[1].tolist()
    [False, True, False]
    """
    p = _probs(probs)
    check_int("k", k, minimum=0)
    keep = np.ones(p.size, dtype=bool)
    if 0 < k < p.size:
        keep[:] = False
        keep[np.argsort(-p, kind="stable")[:k]] = True
    out = np.where(keep, p, 0.0)
    return out / out.sum(), keep


def entropy_bits(probs) -> float:
    """Shannon entropy in bits: how many yes/no questions the next token is worth.

    >>> entropy_bits([0.25, 0.25, 0.25, 0.25])
    2.0
    """
    p = _probs(probs)
    nz = p[p > 0]
    return float(-(nz * np.log2(nz)).sum())


DEFAULT_LABELS = ("mat", "floor", "sofa", "bed", "roof", "chair", "rug", "keyboard", "moon", "banana")
DEFAULT_LOGITS = (5.0, 3.9, 3.5, 3.2, 2.4, 2.2, 1.8, 1.1, -0.5, -1.5)   # illustrative next-token logits


@checked_params
@dataclass(frozen=True)
class SamplingParams:
    """Controls of the sampler: a small logits vector, temperature, top-k and top-p."""

    logits: tuple = DEFAULT_LOGITS
    labels: tuple = DEFAULT_LABELS
    temperature: float = 1.0
    top_k: int = 0                      # 0: off
    top_p: float = 1.0                  # 1: off
    samples: int = 0                    # draws to tally (0: none)
    seed: int = 0

    def __post_init__(self) -> None:
        _logits(self.logits)
        if len(self.labels) != len(self.logits):
            raise ValueError("labels and logits must have the same length")
        check_non_negative("temperature", self.temperature)
        check_int("top_k", self.top_k, minimum=0)
        check_range("top_p", self.top_p, 0.0, 1.0)
        check_int("samples", self.samples, minimum=0, maximum=10_000_000)
        check_int("seed", self.seed, minimum=0)


@dataclass(frozen=True)
class SamplingResult:
    """The distribution at each stage of the sampler."""

    labels: list
    logits: np.ndarray                  # (vocab,)
    probs_base: np.ndarray              # (vocab,) softmax at temperature 1
    probs_tempered: np.ndarray          # (vocab,) softmax at the chosen temperature
    probs_final: np.ndarray             # (vocab,) after top-k and top-p, renormalised
    kept: np.ndarray                    # (vocab,) bool
    kept_count: int
    entropy_bits_base: float
    entropy_bits_final: float
    sampled_counts: np.ndarray          # (vocab,) tallies of `samples` draws from probs_final


def apply_sampling(params: SamplingParams = SamplingParams()) -> SamplingResult:
    """Temperature, then top-k, then top-p, on a logits vector; optionally draw samples.

    >>> r = apply_sampling(SamplingParams(temperature=0.5, top_p=0.9))
    >>> r.kept_count < len(r.labels) and r.entropy_bits_final < r.entropy_bits_base
    True
    """
    p = params
    z = _logits(p.logits)
    base = softmax(z, 1.0)
    tempered = softmax(z, p.temperature)
    after_k, keep_k = top_k_filter(tempered, p.top_k)
    final, keep_p = top_p_filter(after_k, p.top_p)
    keep = keep_k & keep_p
    counts = np.zeros(z.size, dtype=np.int64)
    if p.samples:
        draws = np.random.default_rng(p.seed).choice(z.size, size=p.samples, p=final)
        counts = np.bincount(draws, minlength=z.size)
    return SamplingResult(labels=list(p.labels), logits=z, probs_base=base, probs_tempered=tempered,
                          probs_final=final, kept=keep, kept_count=int(keep.sum()),
                          entropy_bits_base=entropy_bits(base), entropy_bits_final=entropy_bits(final),
                          sampled_counts=counts)
