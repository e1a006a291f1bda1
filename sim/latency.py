"""The numbers users feel: TTFT, TPOT, ITL, end-to-end latency, throughput and goodput.

Definitions (R1, R2, R16):

- TTFT, time to first token: arrival to the first output token. The first token comes
  from the prefill pass's logits, so for a request alone on the GPU TTFT = prefill time.
- ITL, inter-token latency: the gap between two consecutive output tokens (one decode step).
- TPOT, time per output token: (E2E - TTFT) / (output tokens - 1), the mean ITL.
- E2E, end-to-end latency: TTFT + the sum of the ITLs ~ TTFT + (output tokens - 1) x TPOT.
- Throughput: output tokens per second over a run. Goodput: requests per second that meet
  both the TTFT and the TPOT objective (DistServe, R16).

>>> tpot_from_e2e(e2e_s=2.5, ttft_s=0.5, output_tokens=201)
0.01
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from sim.calibration import Calibration
from sim.checks import check_int, check_non_negative, check_positive, checked_params
from sim.hardware import resolve as resolve_gpu
from sim.models import resolve as resolve_model
from sim.roofline import Batch, Precision, StepCost, attention_share_of_prefill, forward_pass

READING_WORDS_PER_MIN = 238.0   # average silent reading speed quoted in the guide (GUIDE_PLAN ch05)
TOKENS_PER_WORD = 4.0 / 3.0     # rule of thumb for English text under BPE tokenizers (~0.75 words per token)


@dataclass(frozen=True)
class SLO:
    """Latency objectives a request must meet to count towards goodput."""

    name: str
    ttft_s: float                  # objective on time to first token
    tpot_s: float                  # objective on time per output token

    def __post_init__(self) -> None:
        check_positive("ttft_s", self.ttft_s)
        check_positive("tpot_s", self.tpot_s)


MLPERF_V50_LLAMA2_70B_INTERACTIVE = SLO(
    "MLPerf Inference v5.0, Llama 2 70B interactive (P99)", ttft_s=0.450, tpot_s=0.040)  # GUIDE_PLAN ch05


def tpot_from_e2e(e2e_s: float, ttft_s: float, output_tokens: int) -> float:
    """TPOT = (E2E - TTFT) / (output tokens - 1); needs at least two output tokens.

    >>> tpot_from_e2e(e2e_s=4.5, ttft_s=0.5, output_tokens=201)
    0.02
    """
    check_int("output_tokens", output_tokens, minimum=2)
    check_non_negative("ttft_s", ttft_s)
    if e2e_s < ttft_s:
        raise ValueError(f"e2e_s ({e2e_s}) must be >= ttft_s ({ttft_s})")
    return (e2e_s - ttft_s) / (output_tokens - 1)


def reading_speed_tokens_per_s(words_per_min: float = READING_WORDS_PER_MIN,
                               tokens_per_word: float = TOKENS_PER_WORD) -> float:
    """Tokens per second a reader consumes: 238 words/min x 4/3 tokens/word / 60 ~ 5.3 tokens/s.

    >>> round(reading_speed_tokens_per_s(), 1)
    5.3
    """
    return check_positive("words_per_min", words_per_min) * check_positive("tokens_per_word", tokens_per_word) / 60.0


@dataclass(frozen=True)
class Workload:
    """A kind of request: how much it reads and how much it writes (illustrative sizes)."""

    name: str
    prompt_tokens: int
    output_tokens: int
    description: str


PRESETS: dict = {
    "chat": Workload("chat", 1_000, 250, "a chat turn: some history and a question, a paragraph back"),
    "summarise": Workload("summarise", 16_000, 400, "summarise a long document: long prompt, short answer"),
    "essay": Workload("essay", 200, 2_000, "write an essay: short prompt, long answer"),
}


@checked_params
@dataclass(frozen=True)
class LatencyParams:
    """Controls of the latency figure; explicit lengths override the preset's."""

    model: str = "llama-3.1-8b"
    gpu: str = "H100-SXM"
    preset: str = "chat"                # key of PRESETS
    prompt_tokens: Optional[int] = None
    output_tokens: Optional[int] = None
    concurrent_users: int = 1           # requests decoding together (each at the same lengths)
    precision: Precision = Precision()
    cuda_graphs: bool = True            # decode steps replayed as graphs (R2)
    slo: SLO = MLPERF_V50_LLAMA2_70B_INTERACTIVE
    grid_points: int = 24               # samples of the attention-share-vs-prompt curve

    def __post_init__(self) -> None:
        if self.preset not in PRESETS:
            raise ValueError(f"unknown preset {self.preset!r}; valid presets: {', '.join(PRESETS)}")
        if self.prompt_tokens is not None:
            check_int("prompt_tokens", self.prompt_tokens, minimum=1)
        if self.output_tokens is not None:
            check_int("output_tokens", self.output_tokens, minimum=1)
        check_int("concurrent_users", self.concurrent_users, minimum=1)
        check_int("grid_points", self.grid_points, minimum=2)

    @property
    def lengths(self) -> tuple:
        """(prompt tokens, output tokens) after overrides."""
        w = PRESETS[self.preset]
        return (self.prompt_tokens if self.prompt_tokens is not None else w.prompt_tokens,
                self.output_tokens if self.output_tokens is not None else w.output_tokens)


@dataclass(frozen=True)
class LatencyResult:
    """Latencies of one request on an otherwise idle GPU (or with identical neighbours)."""

    prompt_tokens: int
    output_tokens: int
    ttft_s: float                       # = prefill time
    tpot_s: float                       # mean ITL; nan for a single output token
    e2e_s: float                        # ttft + sum(itl)
    itl_s: np.ndarray                   # (output_tokens - 1,) each decode step
    decode_time_s: float
    prefill_attention_time_s: float     # attention kernels inside the prefill (busy time)
    attention_share_of_prefill: float   # prefill_attention_time_s / ttft_s
    tokens_per_s_per_user: float        # 1 / tpot
    reading_speed_tokens_per_s: float   # for comparison: a human reader
    meets_slo: bool                     # ttft and tpot both within the SLO (deterministic model: P99 = value)
    slo_name: str
    prompt_grid_tokens: np.ndarray      # (n,) prompt lengths for the attention-share curve
    attention_share_grid: np.ndarray    # (n,) attention share of prefill time at each prompt length
    calibration_note: str


def estimate_latency(params: LatencyParams = LatencyParams(),
                     calibration: Optional[Calibration] = None) -> LatencyResult:
    """TTFT, TPOT, ITLs, E2E and the attention share of prefill for one request shape.

    The prefill is one forward pass over the prompt (of every concurrent user); decode
    step i runs at context prompt + i. The attention share rises with prompt length
    because attention FLOPs grow with its square while GEMM FLOPs grow linearly.

    >>> r = estimate_latency()
    >>> bool(abs(r.e2e_s - (r.ttft_s + (r.output_tokens - 1) * r.tpot_s)) < 1e-9)
    True
    """
    p = params
    m, g = resolve_model(p.model), resolve_gpu(p.gpu)
    prompt, out = p.lengths
    users = p.concurrent_users
    pre = forward_pass(m, g, Batch.prefill(prompt, users), p.precision, calibration, cuda_graphs=False)
    cost = StepCost(m, g, p.precision, calibration, p.cuda_graphs)
    itl = cost.decode_times_s(users, prompt + np.arange(out - 1))
    decode = float(itl.sum())
    ttft = pre.time_s
    tpot = decode / (out - 1) if out > 1 else math.nan
    attn = pre.busy_time_by_kind_s()["attention"]
    grid = np.unique(np.geomspace(16, max(m.max_context_tokens or 131072, prompt), p.grid_points)
                     .round().astype(np.int64))
    share = attention_share_of_prefill(m, g, grid, p.precision, cost.calibration)
    meets = ttft <= p.slo.ttft_s and (out == 1 or tpot <= p.slo.tpot_s)
    return LatencyResult(
        prompt_tokens=prompt, output_tokens=out, ttft_s=ttft, tpot_s=tpot, e2e_s=ttft + decode, itl_s=itl,
        decode_time_s=decode, prefill_attention_time_s=attn, attention_share_of_prefill=attn / ttft,
        tokens_per_s_per_user=1.0 / tpot if out > 1 else math.nan,
        reading_speed_tokens_per_s=reading_speed_tokens_per_s(), meets_slo=bool(meets), slo_name=p.slo.name,
        prompt_grid_tokens=grid, attention_share_grid=share, calibration_note=cost.calibration.note)


@dataclass(frozen=True)
class ServingMetrics:
    """Throughput and goodput of a finished run under an SLO."""

    requests: int
    makespan_s: float
    throughput_tokens_per_s: float      # output tokens / makespan
    requests_per_s: float
    goodput_requests_per_s: float       # requests meeting both objectives / makespan (R16)
    slo_attainment: float               # share of requests meeting both objectives
    ttft_p50_s: float
    ttft_p99_s: float
    tpot_p50_s: float                   # over requests with more than one output token
    tpot_p99_s: float
    slo_name: str


def serving_metrics(ttft_s: np.ndarray, tpot_s: np.ndarray, output_tokens: np.ndarray, makespan_s: float,
                    slo: SLO = MLPERF_V50_LLAMA2_70B_INTERACTIVE) -> ServingMetrics:
    """Throughput, goodput and latency percentiles from per-request TTFT and TPOT.

    A request with one output token has no TPOT (nan) and is judged on TTFT alone.

    >>> m = serving_metrics(np.array([0.1, 0.5]), np.array([0.02, 0.02]), np.array([10, 10]), 2.0)
    >>> m.goodput_requests_per_s, m.slo_attainment
    (0.5, 0.5)
    """
    ttft = np.asarray(ttft_s, dtype=float)
    tpot = np.asarray(tpot_s, dtype=float)
    out = np.asarray(output_tokens, dtype=float)
    if not (ttft.shape == tpot.shape == out.shape) or ttft.ndim != 1 or ttft.size == 0:
        raise ValueError("ttft_s, tpot_s and output_tokens must be 1-D arrays of the same non-zero length")
    check_positive("makespan_s", makespan_s)
    ok = (ttft <= slo.ttft_s) & (np.isnan(tpot) | (tpot <= slo.tpot_s))
    valid = tpot[~np.isnan(tpot)]
    pct = (lambda a, q: float(np.percentile(a, q)) if a.size else math.nan)
    return ServingMetrics(
        requests=int(ttft.size), makespan_s=float(makespan_s), throughput_tokens_per_s=float(out.sum() / makespan_s),
        requests_per_s=ttft.size / makespan_s, goodput_requests_per_s=float(ok.sum() / makespan_s),
        slo_attainment=float(ok.mean()), ttft_p50_s=pct(ttft, 50), ttft_p99_s=pct(ttft, 99),
        tpot_p50_s=pct(valid, 50), tpot_p99_s=pct(valid, 99), slo_name=slo.name)


def measure_schedule(result, slo: SLO = MLPERF_V50_LLAMA2_70B_INTERACTIVE) -> ServingMetrics:
    """`serving_metrics` of a `sim.scheduler.ScheduleResult`.

    >>> from sim.scheduler import simulate_schedule
    >>> measure_schedule(simulate_schedule()).requests
    12
    """
    return serving_metrics(result.ttft_s, result.tpot_s, result.output_tokens, result.makespan_s, slo)
