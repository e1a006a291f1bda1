"""The numbers users feel: TTFT, TPOT, ITL, end-to-end latency, throughput and goodput.

Definitions (R1, R2, R16):

- TTFT, time to first token: arrival to the first output token. The first token comes
  from the prefill pass's logits, so for a request alone on the GPU TTFT = prefill time.
- ITL, inter-token latency: the gap between two consecutive output tokens (one decode step).
- TPOT, time per output token: (E2E - TTFT) / (output tokens - 1), the mean ITL.
- E2E, end-to-end latency: TTFT + the sum of the ITLs ~ TTFT + (output tokens - 1) x TPOT.
- Throughput: output tokens per second over a run.
- SLO attainment: the share of requests that meet both the TTFT and the TPOT objective.
- Goodput (DistServe, R16): the highest request rate a deployment serves while a target
  share of requests (DistServe's evaluation: 90%) meets the SLO (`goodput`).

>>> tpot_from_e2e(e2e_s=2.5, ttft_s=0.5, output_tokens=201)
0.01
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Optional

import numpy as np

from sim.batch import Batch, Precision
from sim.checks import check_int, check_non_negative, check_positive, check_range, checked_params
from sim.forward import StepCost, attention_share_of_prefill, forward_pass, step_cost
from sim.hardware import resolve as resolve_gpu
from sim.kernel_model import Calibration
from sim.long_context import chunked_prefill_s
from sim.models import resolve as resolve_model

READING_WORDS_PER_MIN = 238.0   # adult silent reading of English non-fiction, words a minute (READING)
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

    def met(self, ttft_s, tpot_s) -> np.ndarray:
        """Which requests meet both objectives; a one-token answer (TPOT nan) has only a TTFT to meet."""
        ttft_s, tpot_s = np.asarray(ttft_s), np.asarray(tpot_s)
        return (ttft_s <= self.ttft_s) & (np.isnan(tpot_s) | (tpot_s <= self.tpot_s))


MLPERF_V50_LLAMA2_70B_INTERACTIVE = SLO(
    "MLPerf Inference v5.0, Llama 2 70B interactive (P99)", ttft_s=0.450, tpot_s=0.040)  # MLPERF


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
    slo_ttft_s: float                   # the SLO's limits, drawn for scale
    slo_tpot_s: float
    note: str                           # the setting, the limits and the calibration, in a sentence or three


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
    shipped = calibration is None and isinstance(p.model, str) and isinstance(p.gpu, str)
    cost = step_cost(p.model, p.gpu, p.precision, calibration, p.cuda_graphs)
    itl = cost.decode_times_s(users, prompt + np.arange(out - 1))
    decode = float(itl.sum())
    ttft = pre.time_s
    tpot = decode / (out - 1) if out > 1 else math.nan
    attn = pre.busy_time_by_kind_s()["attention"]
    top = max(m.max_context_tokens or 131072, prompt)
    if shipped:
        grid, share = (a.copy() for a in _shipped_share_curve(p.model, p.gpu, p.precision, top, p.grid_points))
    else:
        grid, share = _share_curve(m, g, p.precision, cost.calibration, top, p.grid_points)
    meets = ttft <= p.slo.ttft_s and (out == 1 or tpot <= p.slo.tpot_s)
    return LatencyResult(
        prompt_tokens=prompt, output_tokens=out, ttft_s=ttft, tpot_s=tpot, e2e_s=ttft + decode, itl_s=itl,
        decode_time_s=decode, prefill_attention_time_s=attn, attention_share_of_prefill=attn / ttft,
        tokens_per_s_per_user=1.0 / tpot if out > 1 else math.nan,
        reading_speed_tokens_per_s=reading_speed_tokens_per_s(), meets_slo=bool(meets), slo_name=p.slo.name,
        prompt_grid_tokens=grid, attention_share_grid=share, calibration_note=cost.calibration.note,
        slo_ttft_s=p.slo.ttft_s, slo_tpot_s=p.slo.tpot_s,
        note=(f"{m.display_name} in {p.precision.weight_dtype}, "
              + ("one request alone on the GPU (TTFT = the prefill). " if users == 1 else
                 f"{users} identical requests together on the GPU. ")
              + f"Red: {p.slo.name} limits, TTFT {p.slo.ttft_s * 1e3:.0f} ms and TPOT {p.slo.tpot_s * 1e3:.0f} ms, "
              f"shown for scale (they were set for a 70B model). {cost.calibration.note}"))


def _share_curve(m, g, precision: Precision, calibration: Calibration, top: int, points: int) -> tuple:
    """(prompt lengths, attention share of prefill at each): `points` lengths from 16 to `top`, evenly on a log scale."""
    grid = np.unique(np.geomspace(16, top, points).round().astype(np.int64))
    return grid, attention_share_of_prefill(m, g, grid, precision, calibration)


# With the shipped calibrations (the figures' case) the attention-share curve of one model and
# GPU does not change when the lengths do: kept between calls (a reader dragging the prompt
# length recomputed the same 24-point curve on every move), as `step_cost` keeps the decode costs.
@lru_cache(maxsize=64)
def _shipped_share_curve(model: str, gpu: str, precision: Precision, top: int, points: int) -> tuple:
    m, g = resolve_model(model), resolve_gpu(gpu)
    return _share_curve(m, g, precision, None, top, points)


@dataclass(frozen=True)
class ServingMetrics:
    """Throughput and SLO attainment of a finished run."""

    requests: int
    makespan_s: float
    throughput_tokens_per_s: float      # output tokens / makespan
    requests_per_s: float
    slo_met_requests_per_s: float       # requests meeting both objectives / makespan (goodput is `goodput`)
    slo_attainment: float               # share of requests meeting both objectives
    ttft_p50_s: float
    ttft_p99_s: float
    tpot_p50_s: float                   # over requests with more than one output token
    tpot_p99_s: float
    slo_name: str


def serving_metrics(ttft_s: np.ndarray, tpot_s: np.ndarray, output_tokens: np.ndarray, makespan_s: float,
                    slo: SLO = MLPERF_V50_LLAMA2_70B_INTERACTIVE) -> ServingMetrics:
    """Throughput, SLO attainment and latency percentiles from per-request TTFT and TPOT.

    A request with one output token has no TPOT (nan) and is judged on TTFT alone.

    >>> m = serving_metrics(np.array([0.1, 0.5]), np.array([0.02, 0.02]), np.array([10, 10]), 2.0)
    >>> m.slo_met_requests_per_s, m.slo_attainment
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
        requests_per_s=ttft.size / makespan_s, slo_met_requests_per_s=float(ok.sum() / makespan_s),
        slo_attainment=float(ok.mean()), ttft_p50_s=pct(ttft, 50), ttft_p99_s=pct(ttft, 99),
        tpot_p50_s=pct(valid, 50), tpot_p99_s=pct(valid, 99), slo_name=slo.name)


def measure_schedule(result, slo: SLO = MLPERF_V50_LLAMA2_70B_INTERACTIVE) -> ServingMetrics:
    """`serving_metrics` of a `sim.scheduler.ScheduleResult`.

    >>> from sim.scheduler import simulate_schedule
    >>> measure_schedule(simulate_schedule()).requests
    12
    """
    return serving_metrics(result.ttft_s, result.tpot_s, result.output_tokens, result.makespan_s, slo)


@dataclass(frozen=True)
class TTFTLevers:
    """The first-token time of one long prompt, alone on the GPU, under the levers that change it."""

    prompt_tokens: int
    baseline_s: float                   # the whole prompt in one prefill step
    chunk_tokens: int
    chunked_s: float                    # the same prompt in chunks (it gets slower, not faster)
    cached_prefix_tokens: int
    prefix_cached_s: float              # only the uncached suffix is prefilled, attending to the cached prefix
    fp8_s: float                        # fp8 weights and activations in the GEMMs (attention stays bf16)
    tp: int
    tensor_parallel_s: float            # the prefill split over `tp` GPUs of one server
    faster_gpu: str
    faster_gpu_s: float                 # the same prefill on `faster_gpu`


def ttft_levers(params: LatencyParams = LatencyParams(preset="summarise"), cached_prefix_tokens: int = 15_000,
                chunk_tokens: int = 512, tp: int = 4, faster_gpu: str = "B200",
                calibration: Optional[Calibration] = None) -> TTFTLevers:
    """TTFT of `params`' prompt alone on the GPU: as is, chunked, with a cached prefix, in fp8,
    with tensor parallelism and on a faster GPU. Each lever changes one thing.

    >>> t = ttft_levers()
    >>> bool(t.chunked_s > t.baseline_s > t.fp8_s > t.prefix_cached_s)
    True
    """
    from sim.parallel import tensor_parallel_prefill_s   # parallel imports the forward pass only; kept local for clarity

    p = params
    prompt, _ = p.lengths
    check_int("cached_prefix_tokens", cached_prefix_tokens, minimum=0, maximum=prompt - 1)
    check_int("chunk_tokens", chunk_tokens, minimum=1)
    g = resolve_gpu(p.gpu)
    cal = calibration
    base = forward_pass(p.model, g, Batch.prefill(prompt, 1), p.precision, cal, cuda_graphs=False).time_s
    cost = StepCost(p.model, g, p.precision, cal, cuda_graphs=False)
    fp8 = replace(p.precision, weight_dtype="fp8", act_dtype="fp8")
    return TTFTLevers(
        prompt_tokens=prompt, baseline_s=base, chunk_tokens=chunk_tokens,
        chunked_s=chunked_prompt_s(p.model, g, prompt, chunk_tokens, p.precision, cal),
        cached_prefix_tokens=cached_prefix_tokens,
        prefix_cached_s=cost.time_s([prompt - cached_prefix_tokens], [cached_prefix_tokens]),
        fp8_s=forward_pass(p.model, g, Batch.prefill(prompt, 1), fp8, cal, cuda_graphs=False).time_s,
        tp=tp, tensor_parallel_s=tensor_parallel_prefill_s(p.model, g, prompt, tp, p.precision, cal),
        faster_gpu=faster_gpu,
        faster_gpu_s=forward_pass(p.model, faster_gpu, Batch.prefill(prompt, 1), p.precision, None,
                                  cuda_graphs=False).time_s)


@checked_params
@dataclass(frozen=True)
class LoadParams:
    """A loaded server: Poisson arrivals at `rate_per_s` through the continuous-batching scheduler.

    The request mix (log-uniform prompt and output lengths) is an illustrative assumption,
    not a measured trace. The seed fixes the arrival pattern and lengths; changing the
    rate rescales the same gaps, so runs at different rates are comparable.
    """

    model: str = "llama-3.1-8b"
    gpu: str = "H100-SXM"
    rate_per_s: float = 20.0            # mean arrivals per second
    requests: int = 60
    prompt_tokens_min: int = 200
    prompt_tokens_max: int = 4000
    output_tokens_min: int = 16
    output_tokens_max: int = 512
    max_batch: int = 64                 # slots
    chunked_prefill: bool = True
    token_budget: int = 2048            # tokens per step with chunked prefill
    slo: SLO = MLPERF_V50_LLAMA2_70B_INTERACTIVE
    target_attainment: float = 0.9      # share of requests that must meet the SLO (DistServe's 90%, R16)
    bins: int = 24                      # histogram bins per metric
    seed: int = 0

    def __post_init__(self) -> None:
        check_range("rate_per_s", self.rate_per_s, 0.01, 10_000.0)
        check_int("requests", self.requests, minimum=2, maximum=2000)
        check_int("bins", self.bins, minimum=2, maximum=200)
        check_range("target_attainment", self.target_attainment, 0.0, 1.0)
        check_int("max_batch", self.max_batch, minimum=1, maximum=4096)
        check_int("token_budget", self.token_budget, minimum=1)
        self.mix()                      # checks the length and seed fields

    def mix(self):
        """The seeded request mix (a `sim.scheduler.RequestMixParams`)."""
        from sim.scheduler import RequestMixParams
        return RequestMixParams(requests=self.requests, mean_interarrival_s=1.0 / self.rate_per_s,
                                prompt_tokens_min=self.prompt_tokens_min, prompt_tokens_max=self.prompt_tokens_max,
                                output_tokens_min=self.output_tokens_min, output_tokens_max=self.output_tokens_max,
                                seed=self.seed)


@dataclass(frozen=True)
class LoadResult:
    """Per-request latencies of a loaded run, their distributions and percentiles."""

    rate_per_s: float
    arrival_s: np.ndarray               # (requests,)
    ttft_s: np.ndarray                  # (requests,) queueing + prefill, and waiting behind other steps
    tpot_s: np.ndarray                  # (requests,) nan for one-token outputs
    meets_slo: np.ndarray               # (requests,) bool: both objectives met
    ttft_misses: int                    # requests over the TTFT objective
    tpot_misses: int                    # requests over the TPOT objective (a request can miss both)
    ttft_edges_s: np.ndarray            # (bins + 1,) log-spaced histogram edges
    ttft_counts: np.ndarray             # (bins,)
    tpot_edges_s: np.ndarray            # (bins + 1,)
    tpot_counts: np.ndarray             # (bins,)
    metrics: ServingMetrics             # P50/P99, attainment, throughput
    meets_target: bool                  # attainment >= target_attainment
    mean_batch: float                   # time-weighted mean of requests in a step
    slo_name: str
    calibration_note: str
    note: str                           # the setting and the assumed workload, for the figure


def _log_hist(values: np.ndarray, bins: int, lo: float, hi: float) -> tuple:
    v = values[np.isfinite(values)]
    edges = np.geomspace(lo, hi, bins + 1)
    counts, _ = np.histogram(np.clip(v, lo, hi), edges)
    return edges, counts


def simulate_load(params: LoadParams = LoadParams(), calibration: Optional[Calibration] = None) -> LoadResult:
    """Poisson arrivals at a rate through `sim.scheduler.simulate_schedule`: TTFT and TPOT of every request.

    Under load TTFT includes the wait for a slot and for the other requests' steps, and
    TPOT the other requests' prefill chunks sharing each step. Histograms are on fixed
    log-spaced bins (10 ms to 100 s for TTFT, 1 ms to 1 s for TPOT), values outside
    clipped into the end bins.

    >>> r = simulate_load()
    >>> r.metrics.requests, bool(r.metrics.ttft_p99_s >= r.metrics.ttft_p50_s)
    (60, True)
    """
    from sim.scheduler import SchedulerParams, make_request_mix, simulate_schedule

    p = params
    run = simulate_schedule(SchedulerParams(model=p.model, gpu=p.gpu, max_batch=p.max_batch,
                                            chunked_prefill=p.chunked_prefill, token_budget=p.token_budget,
                                            requests=make_request_mix(p.mix())), calibration)
    m = measure_schedule(run, p.slo)
    ok = p.slo.met(run.ttft_s, run.tpot_s)
    te, tc = _log_hist(run.ttft_s, p.bins, 1e-2, 100.0)
    pe, pc = _log_hist(run.tpot_s, p.bins, 1e-3, 1.0)
    durs = run.step_end_s - run.step_start_s
    in_step = run.step_busy_slots
    return LoadResult(
        rate_per_s=p.rate_per_s, arrival_s=run.arrival_s, ttft_s=run.ttft_s, tpot_s=run.tpot_s, meets_slo=ok,
        ttft_misses=int((run.ttft_s > p.slo.ttft_s).sum()), tpot_misses=int((run.tpot_s > p.slo.tpot_s).sum()),
        ttft_edges_s=te, ttft_counts=tc, tpot_edges_s=pe, tpot_counts=pc, metrics=m,
        meets_target=bool(m.slo_attainment >= p.target_attainment),
        mean_batch=float((durs * in_step).sum() / durs.sum()), slo_name=p.slo.name, calibration_note=run.calibration_note,
        note=(f"{resolve_model(p.model).display_name} in bf16 on one {resolve_gpu(p.gpu).display_name}, continuous "
              f"batching with {p.max_batch} slots. Workload (an assumption, not a measured trace): {p.requests} "
              f"requests, Poisson arrivals (seed {p.seed}), prompts {p.prompt_tokens_min:,}-{p.prompt_tokens_max:,} "
              f"and answers {p.output_tokens_min}-{p.output_tokens_max} tokens (log-uniform); P99 of {p.requests} "
              f"requests is close to the worst one. Limits: {p.slo.name}, TTFT {p.slo.ttft_s * 1e3:.0f} ms and "
              f"TPOT {p.slo.tpot_s * 1e3:.0f} ms, borrowed for scale. {run.calibration_note}"))


@dataclass(frozen=True)
class GoodputResult:
    """SLO attainment against offered rate, and DistServe's goodput."""

    rates_per_s: np.ndarray             # (n,) offered request rates, ascending
    attainment: np.ndarray              # (n,) share of requests meeting the SLO at each rate
    target_attainment: float
    goodput_per_s: float                # highest rate of the grid up to which every rate meets the target (0: none)


def goodput(params: LoadParams = LoadParams(), rates_per_s=tuple(range(2, 42, 2)),
            calibration: Optional[Calibration] = None) -> GoodputResult:
    """DistServe's goodput (R16): the highest request rate at which at least
    `target_attainment` of requests meet the SLO, searched over `rates_per_s`.

    A finite run's attainment can wobble with the rate, so the answer is the last rate
    before the first one that misses the target (a conservative reading).

    >>> g = goodput(rates_per_s=(5, 10, 40))
    >>> float(g.goodput_per_s)
    10.0
    """
    rates = np.array(sorted(float(r) for r in rates_per_s))
    if rates.size == 0:
        raise ValueError("rates_per_s must not be empty")
    att = np.array([simulate_load(replace(params, rate_per_s=float(r)), calibration).metrics.slo_attainment
                    for r in rates])
    ok = att >= params.target_attainment
    first_miss = int(np.argmin(ok)) if not ok.all() else rates.size
    return GoodputResult(rates_per_s=rates, attainment=att, target_attainment=params.target_attainment,
                         goodput_per_s=float(rates[first_miss - 1]) if first_miss > 0 else 0.0)


def chunked_prompt_s(model, gpu, prompt_tokens: int, chunk_tokens: int, precision: Optional[Precision] = None,
                      calibration: Optional[Calibration] = None, cuda_graphs: bool = False) -> float:
    """Prefill time of one prompt alone on the GPU, in steps of at most `chunk_tokens` tokens.

    Chunk i attends to the keys and values of the chunks before it (read back from the
    cache) and only the last chunk computes logits. `cuda_graphs` charges each step one
    launch instead of one per kernel. A chunk at least as long as the prompt is the whole
    prefill in one step.

    >>> whole = chunked_prompt_s("llama-3.1-8b", "H100-SXM", 8192, 8192)
    >>> bool(chunked_prompt_s("llama-3.1-8b", "H100-SXM", 8192, 512) > whole)
    True
    """
    check_int("prompt_tokens", prompt_tokens, minimum=1)
    check_int("chunk_tokens", chunk_tokens, minimum=1)
    cost = StepCost(model, gpu, precision or Precision(), calibration, cuda_graphs)
    return float(chunked_prefill_s(cost, [(cost.model.num_layers, None)], [prompt_tokens], chunk_tokens=chunk_tokens,
                                   cuda_graphs=cuda_graphs)[0][0])
