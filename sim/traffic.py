"""Chapter 20's traffic: tenant A's arrival rate over time, tenant B's presets, and the seeded requests.

Every function takes a `sim.service.ServiceParams` (its arrival and length fields).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sim.workload import RequestSpec

ARRIVALS = ("poisson", "bursty", "daily")
BURST_PERIOD_S = 60.0               # bursty arrivals: one burst a minute
# what tenant B does, as the chapter's presets (ServiceParams fields)
TENANT_B = {
    "light": {"b_rate_per_s": 0.5, "b_prompt_tokens": 1024, "b_output_tokens": 512, "b_from_s": 0.0, "b_to_s": 180.0},
    "storm": {"b_rate_per_s": 2.0, "b_prompt_tokens": 32768, "b_output_tokens": 256, "b_from_s": 60.0,
              "b_to_s": 120.0},                 # a minute of long prompts
    "long-contexts": {"b_rate_per_s": 0.3, "b_prompt_tokens": 32768, "b_output_tokens": 4096, "b_from_s": 0.0,
                      "b_to_s": 180.0},         # few requests, each holding tens of thousands of KV tokens
}


def rate_at(p, t: np.ndarray) -> np.ndarray:
    """Tenant A's arrival rate (requests/s) at times t.

    >>> from sim.service import ServiceParams
    >>> p = ServiceParams(arrivals="bursty", rate_per_s=4.0, peak_to_mean=3.0)
    >>> [float(x) for x in rate_at(p, np.array([0.0, 35.0]))]       # between bursts, in one
    [2.4, 12.0]
    """
    t = np.asarray(t, dtype=float)
    k, mean = p.peak_to_mean, p.rate_per_s
    if p.arrivals == "poisson":
        return np.full(t.shape, mean)
    if p.arrivals == "daily":
        w, power = daily_shape(k)
        s = (1.0 - np.cos(2.0 * math.pi * t / p.duration_s)) / 2.0
        return mean * ((1.0 - w) + w * s ** power / _mean_of_power(power))
    duty = 1.0 / (2.0 * k)                  # the burst's share of each period
    phase = (t % BURST_PERIOD_S) / BURST_PERIOD_S
    burst = (phase >= 0.5) & (phase < 0.5 + duty)
    return np.where(burst, k * mean, mean * (1.0 - k * duty) / (1.0 - duty))


def _mean_of_power(power: float) -> float:
    """The mean over a period of s^power, s = (1 - cos) / 2: Gamma(power + 1/2) / (sqrt(pi) Gamma(power + 1))."""
    return math.exp(math.lgamma(power + 0.5) - math.lgamma(power + 1.0)) / math.sqrt(math.pi)


def daily_shape(k: float) -> tuple:
    """(w, power) of a daily cycle with peak-to-mean k: rate = mean x ((1 - w) + w s^power / mean of s^power).

    Up to k = 2 a raised cosine (power 1) lifted off zero (w = k - 1); beyond it the trough is
    zero (w = 1) and the peak narrows (the power for which the peak is k times the mean).

    >>> daily_shape(1.5), daily_shape(2.0)
    ((0.5, 1.0), (1.0, 1.0))
    >>> w, power = daily_shape(5.0); round(1 / _mean_of_power(power), 6)
    5.0
    """
    if k <= 2.0:
        return k - 1.0, 1.0
    lo, hi = 1.0, 1e4
    for _ in range(100):               # 1 / mean grows with the power: bisect for k
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if 1.0 / _mean_of_power(mid) < k else (lo, mid)
    return 1.0, (lo + hi) / 2


def peak_rate(p) -> float:
    """Tenant A's highest arrival rate."""
    return p.rate_per_s * (p.peak_to_mean if p.arrivals != "poisson" else 1.0)


@dataclass(frozen=True)
class Arrival:
    spec: RequestSpec
    tenant: str


def workload(p) -> tuple:
    """Both tenants' requests (`Arrival`s) in arrival order: a seeded thinned Poisson process."""
    rng = np.random.default_rng(p.seed)

    def stream(rate_max: float, start: float, end: float, rate_fn) -> np.ndarray:
        n = rng.poisson(rate_max * (end - start)) if rate_max > 0 and end > start else 0
        t = np.sort(rng.uniform(start, end, n))
        return t[rng.uniform(0.0, rate_max, n) < rate_fn(t)] if n else t

    def lengths(n: int, middle: int) -> np.ndarray:
        lo, hi = math.log(max(1, middle // 2)), math.log(middle * 2)
        return np.round(np.exp(rng.uniform(lo, hi, n))).astype(np.int64)

    a = stream(peak_rate(p), 0.0, p.duration_s, lambda t: rate_at(p, t))
    b = stream(p.b_rate_per_s, p.b_from_s, min(p.b_to_s, p.duration_s), lambda t: np.full(t.shape, p.b_rate_per_s))
    rows = [(float(t), "A", int(pr), int(o)) for t, pr, o in zip(a, lengths(a.size, p.prompt_tokens),
                                                                   lengths(a.size, p.output_tokens))]
    rows += [(float(t), "B", int(pr), int(o)) for t, pr, o in zip(b, lengths(b.size, p.b_prompt_tokens),
                                                                    lengths(b.size, p.b_output_tokens))]
    rows.sort()
    return tuple(Arrival(RequestSpec(f"{ten}{i}", round(t, 6), pr, max(o, 2)), ten)
                 for i, (t, ten, pr, o) in enumerate(rows))
