"""The requests a serving simulation runs: one request (RequestSpec), a seeded random mix
of them (RequestMixParams, make_request_mix) and the long-prompt request of chapter 04."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sim.checks import check_int, check_non_negative, checked_params


@dataclass(frozen=True)
class RequestSpec:
    """One request of a workload."""

    name: str
    arrival_s: float       # when it reaches the server
    prompt_tokens: int
    output_tokens: int     # tokens to generate (>= 1; the first comes from the prefill)
    kv_ready: bool = False  # arrives with its prompt's KV and first token, prefilled on another GPU (chapter 19)

    def __post_init__(self) -> None:
        check_non_negative("arrival_s", self.arrival_s)
        check_int("prompt_tokens", self.prompt_tokens, minimum=1)
        check_int("output_tokens", self.output_tokens, minimum=2 if self.kv_ready else 1)


@checked_params
@dataclass(frozen=True)
class RequestMixParams:
    """A seeded random workload: Poisson arrivals, log-uniform prompt and output lengths."""

    requests: int = 12
    mean_interarrival_s: float = 0.015
    prompt_tokens_min: int = 32
    prompt_tokens_max: int = 1024
    output_tokens_min: int = 8
    output_tokens_max: int = 128
    seed: int = 0

    def __post_init__(self) -> None:
        check_int("requests", self.requests, minimum=1, maximum=10_000)
        check_non_negative("mean_interarrival_s", self.mean_interarrival_s)
        check_int("prompt_tokens_min", self.prompt_tokens_min, minimum=1)
        check_int("prompt_tokens_max", self.prompt_tokens_max, minimum=self.prompt_tokens_min)
        check_int("output_tokens_min", self.output_tokens_min, minimum=1)
        check_int("output_tokens_max", self.output_tokens_max, minimum=self.output_tokens_min)
        check_int("seed", self.seed, minimum=0)


def make_request_mix(params: RequestMixParams = RequestMixParams()) -> tuple:
    """Requests "r0", "r1", ... with exponential inter-arrival gaps (the first at t = 0).

    >>> mix = make_request_mix(RequestMixParams(requests=3, seed=1))
    >>> [r.name for r in mix], mix[0].arrival_s
    (['r0', 'r1', 'r2'], 0.0)
    """
    p = params
    rng = np.random.default_rng(p.seed)
    gaps = rng.exponential(p.mean_interarrival_s, p.requests) if p.mean_interarrival_s > 0 else np.zeros(p.requests)
    gaps[0] = 0.0
    arrivals = np.cumsum(gaps)

    def log_uniform(lo: int, hi: int) -> np.ndarray:
        return np.round(np.exp(rng.uniform(math.log(lo), math.log(hi), p.requests))).astype(np.int64)

    prompts = log_uniform(p.prompt_tokens_min, p.prompt_tokens_max)
    outputs = log_uniform(p.output_tokens_min, p.output_tokens_max)
    return tuple(RequestSpec(f"r{i}", round(float(arrivals[i]), 6), int(prompts[i]), int(outputs[i]))
                 for i in range(p.requests))


def long_prompt_request(arrival_s: float = 0.05, prompt_tokens: int = 8000, output_tokens: int = 32,
                        name: str = "long") -> RequestSpec:
    """A request with a very long prompt (the figure's "add a long prompt" button).

    >>> long_prompt_request().prompt_tokens
    8000
    """
    return RequestSpec(name, arrival_s, prompt_tokens, output_tokens)
