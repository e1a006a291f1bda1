"""Disaggregated prefill and decode: P GPUs that only prefill, D that only decode (chapter 19).

A colocated server runs both phases on every GPU: chapter 04's scheduler with chunked
prefill, as chapter 05's loaded server (`sim.latency.simulate_load`). A disaggregated one
sends each request to a prefill GPU, which computes the prompt's KV and the first token,
moves that KV over a link to a decode GPU, and lets the decode GPU generate the rest.
Neither phase then waits behind the other, each pool can be sized for its own limit, and
the price is the transfer and a GPU count that comes in pairs at least.

How a P:D split is judged (DistServe's method [R16], sections 3 and 4):
- each pool is simulated once per rate with the guide's scheduler, one GPU of it: a
  prefill GPU runs the requests with one output token (its time to first token); a decode
  GPU runs them arriving with their KV (`RequestSpec.kv_ready`: its time per output token).
  Requests are spread over a pool's GPUs at random, so each GPU of a pool of n sees
  Poisson arrivals at the pool's rate / n (assumed; DistServe assumes Poisson arrivals too);
- request i of the workload is the same request in both pools (its lengths; its arrival
  gaps scaled with the rate); its TTFT is its prefill GPU's (queueing, prefill) plus the
  transfer of its prompt's KV, sent when its prefill ends over a link of its own (no
  layer-by-layer overlap, no contention: assumed), and its TPOT is its decode GPU's, from
  the moment its KV arrives;
- a pool rate between two simulated ones takes each request's latency interpolated in log
  rate;
- a run of a few dozen requests ends before a queue that grows without end has grown
  much, so it cannot show a GPU offered more than it can serve. Above a GPU's capacity
  every request counts as missing its limits. Each capacity is an upper bound from the step
  costs: a prefill GPU's is 1 / the mean prefill time of the workload's prompts; a decode
  GPU's is a full batch (`max_batch`, or fewer if the KV cache cannot hold them) over the
  output tokens it owes, batch / (mean output x its step time); a colocated GPU's is the
  smaller of the two (it has both to do; the bound grants it that either rides free on
  the other's steps);
- the rates run from 1/16 of a colocated GPU's capacity to 1.25 times it;
- goodput (R16, as chapter 05): the highest offered rate per GPU up to which at least
  `target_attainment` of requests meet both limits, on the figure's rate grid.

>>> r = disagg(DisaggParams())                 # Llama 3.1 8B, H100, limits 450 ms and 40 ms
>>> r.best, r.goodput_per_gpu[r.best] < r.goodput_per_gpu["colocated"]
('1:1', True)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Optional

import numpy as np

from sim.batch import Precision
from sim.checks import check_choice, check_int, check_range, checked_params
from sim.forward import step_cost
from sim.hardware import get as get_gpu
from sim.kv import kv_bytes_per_token, kv_capacity_tokens
from sim.latency import SLO, LoadParams, simulate_load
from sim.long_context import full_prefill_s
from sim.models import get as get_model
from sim.models import names as model_names
from sim.parallel import INTERNODE_BYTES_PER_S, PCIE_GEN4_X16_BYTES_PER_S
from sim.scheduler import SchedulerParams, simulate_schedule
from sim.workload import make_request_mix

# (name, label, bytes/s one way or None for the GPU's own NVLink, source): line rates, so
# each transfer time is a lower bound (no protocol overhead, no contention)
LINKS = (
    ("nvlink", "NVLink, within one server", None, "the GPU's datasheet: NVLink bandwidth per GPU, half each way"),
    ("ib400", "InfiniBand NDR, 400 Gb/s", INTERNODE_BYTES_PER_S, "one ConnectX-7 port per GPU [NDR]"),
    ("roce200", "RoCE over 200 Gb/s Ethernet", 200e9 / 8, "one 200 Gb/s port per GPU"),
    ("eth25", "25 Gb/s Ethernet", 25e9 / 8, "DistServe's testbed between nodes [R16]"),
)
LINK_NAMES = tuple(name for name, *_ in LINKS)
LINK_RATES = {name: rate for name, _, rate, _ in LINKS}
TRANSFER_MIN, TRANSFER_MAX = 128, 2 ** 17     # the sweep of prompt lengths for the transfer curves


@checked_params
@dataclass(frozen=True)
class DisaggParams:
    """A workload, the latency limits, the link between the pools and the largest deployment."""

    model: str = "llama-3.1-8b"
    gpu: str = "H100-SXM"
    prompt_tokens: int = 1024           # geometric middle of the prompts (log-uniform from half to twice)
    output_tokens: int = 256            # geometric middle of the answers (log-uniform from half to twice)
    ttft_slo_s: float = 0.45            # the TTFT limit (default: MLPerf v5.0's interactive Llama 2 70B, R1)
    tpot_slo_s: float = 0.04            # the TPOT limit (the same)
    link: str = "ib400"
    max_gpus: int = 4                   # splits P:D with P + D up to this
    target_attainment: float = 0.9      # DistServe's 90% (R16)
    requests: int = 60                  # requests per simulated run
    max_batch: int = 128                # slots per GPU, every GPU
    token_budget: int = 2048            # tokens per step of chunked prefill (colocated and prefill GPUs)
    points: int = 12                    # offered rates per GPU, log-spaced
    seed: int = 0

    LIMITS = {"prompt_tokens": (2 ** 17, "tokens"), "output_tokens": (2 ** 14, "tokens"),
              "max_gpus": (8, "GPUs"), "requests": (400, "requests"), "points": (40, "points"),
              "ttft_slo_s": (600.0, "s"), "tpot_slo_s": (10.0, "s")}

    def __post_init__(self) -> None:
        check_choice("model", self.model, model_names())
        get_gpu(self.gpu)
        check_int("prompt_tokens", self.prompt_tokens, minimum=2)
        check_int("output_tokens", self.output_tokens, minimum=4)
        check_range("ttft_slo_s", self.ttft_slo_s, 1e-3, 600.0)
        check_range("tpot_slo_s", self.tpot_slo_s, 1e-4, 10.0)
        check_choice("link", self.link, LINK_NAMES)
        check_int("max_gpus", self.max_gpus, minimum=2)
        check_range("target_attainment", self.target_attainment, 0.01, 1.0)
        check_int("requests", self.requests, minimum=10)
        check_int("max_batch", self.max_batch, minimum=1, maximum=1024)
        check_int("token_budget", self.token_budget, minimum=64)
        check_int("points", self.points, minimum=3)
        check_int("seed", self.seed, minimum=0)

    def load(self, rate_per_s: float) -> LoadParams:
        """Chapter 05's loaded server with this workload at `rate_per_s`: the colocated GPU."""
        return LoadParams(model=self.model, gpu=self.gpu, rate_per_s=rate_per_s, requests=self.requests,
                          prompt_tokens_min=max(1, self.prompt_tokens // 2), prompt_tokens_max=self.prompt_tokens * 2,
                          output_tokens_min=max(2, self.output_tokens // 2), output_tokens_max=self.output_tokens * 2,
                          max_batch=self.max_batch, chunked_prefill=True, token_budget=self.token_budget,
                          slo=SLO("the figure's limits", self.ttft_slo_s, self.tpot_slo_s),
                          target_attainment=self.target_attainment, seed=self.seed)


def splits(max_gpus: int) -> tuple:
    """Every (P, D) with P, D >= 1 and P + D <= max_gpus, by GPU count and then P.

    >>> splits(4)
    ((1, 1), (1, 2), (2, 1), (1, 3), (2, 2), (3, 1))
    """
    return tuple((p, n - p) for n in range(2, max_gpus + 1) for p in range(1, n))


def split_key(split: tuple) -> str:
    """The key of a split in a result's dicts: (2, 1) -> "2:1"."""
    return f"{split[0]}:{split[1]}"


def link_bytes_per_s(link: str, gpu: str) -> float:
    """One-way bytes/s of a link of LINKS; NVLink is the GPU's own (PCIe 4.0 x16 without one)."""
    rate = LINK_RATES[link]
    return rate if rate is not None else (get_gpu(gpu).nvlink_bytes_per_s_per_direction or PCIE_GEN4_X16_BYTES_PER_S)


@dataclass(frozen=True)
class PoolRuns:
    """One GPU of a pool simulated at each of a grid of rates: per-request latency (s)."""

    rates_per_s: np.ndarray             # (k,) ascending, below the capacity
    latency_s: np.ndarray               # (k, requests) TTFT (prefill pool) or TPOT (decode pool)
    capacity_per_s: float               # the GPU's capacity: every request misses at this rate and above


@dataclass(frozen=True)
class Capacities:
    """Upper bounds on the requests/s one GPU can serve, by role."""

    colocated: float
    prefill: float
    decode: float
    decode_batch: int                   # the full batch the decode bound assumes


def _lengths(p: DisaggParams) -> tuple:
    """(prompts, outputs) of the workload's requests, in tokens: the same at every rate."""
    mix = make_request_mix(p.load(1.0).mix())
    return np.array([r.prompt_tokens for r in mix]), np.array([r.output_tokens for r in mix])


@lru_cache(maxsize=16)
def capacities(p: DisaggParams) -> Capacities:
    """Capacity bounds from the step costs for the workload's requests (module docstring).

    >>> c = capacities(DisaggParams())
    >>> c.colocated == min(c.prefill, c.decode), c.decode_batch
    (True, 128)
    """
    m = get_model(p.model)
    prompts, outputs = _lengths(p)
    cost = step_cost(p.model, p.gpu, Precision())
    pre = full_prefill_s(cost, m.num_layers, prompts)
    prefill = 1.0 / float(pre.mean())
    held = float(np.mean(prompts + outputs / 2))          # tokens a request holds, on average, while it decodes
    kv = kv_capacity_tokens(p.model, p.gpu)
    batch = int(max(1, min(p.max_batch, kv // held)))
    step = cost.uniform_time_s(batch, 1, int(round(held)), cuda_graphs=True)
    decode = batch / (float(outputs.mean()) * step)
    return Capacities(min(prefill, decode), prefill, decode, batch)


@lru_cache(maxsize=16)
def _pool_runs(p: DisaggParams, kind: str, lo: float, hi: float) -> PoolRuns:
    """Rates from lo upward in log steps of 2^(1/4), to the first at or above hi or the capacity."""
    cap = getattr(capacities(p), kind)
    rates, rows = [], []
    rate = lo
    while rate < cap:
        mix = make_request_mix(p.load(rate).mix())
        if kind == "prefill":
            reqs = tuple(replace(r, output_tokens=1) for r in mix)
            run = simulate_schedule(SchedulerParams(model=p.model, gpu=p.gpu, max_batch=p.max_batch, requests=reqs,
                                                    chunked_prefill=True, token_budget=p.token_budget))
            rows.append(run.ttft_s)
        else:
            reqs = tuple(replace(r, kv_ready=True) for r in mix)
            run = simulate_schedule(SchedulerParams(model=p.model, gpu=p.gpu, max_batch=p.max_batch, requests=reqs))
            rows.append(run.tpot_s)
        rates.append(rate)
        if rate >= hi:
            break
        rate *= 2 ** 0.25
    return PoolRuns(np.array(rates), np.array(rows).reshape(len(rates), p.requests), cap)


def _at(runs: PoolRuns, rates: np.ndarray) -> np.ndarray:
    """(len(rates), requests): each request's latency at each rate, interpolated in log rate
    (the lowest run's below the grid); inf at and above the capacity."""
    lat = runs.latency_s
    out = np.full((rates.size, lat.shape[1]), np.inf)
    below = rates < runs.capacity_per_s
    if runs.rates_per_s.size == 1 and below.any():
        out[below] = lat[0]
    elif runs.rates_per_s.size and below.any():      # np.interp, every request at once
        lr = np.log(runs.rates_per_s)
        x = np.clip(np.log(rates[below]), lr[0], lr[-1])
        i = np.clip(np.searchsorted(lr, x, side="right") - 1, 0, lr.size - 2)
        frac = (x - lr[i]) / (lr[i + 1] - lr[i])
        out[below] = lat[i] + frac[:, None] * (lat[i + 1] - lat[i])
    return out


@lru_cache(maxsize=16)
def _colocated_runs(p: DisaggParams, rates: tuple) -> tuple:
    """Chapter 05's loaded server at each rate (`sim.latency.simulate_load`)."""
    return tuple(simulate_load(p.load(r)) for r in rates)


def _attained(p: DisaggParams, ttft: np.ndarray, tpot: np.ndarray) -> np.ndarray:
    """Share of requests (last axis) meeting both limits."""
    return SLO("the figure's", p.ttft_slo_s, p.tpot_slo_s).met(ttft, tpot).mean(axis=-1)


def _goodput(rates: np.ndarray, attainment: np.ndarray, target: float) -> float:
    """The last rate before the first one that misses the target (chapter 05's reading); 0: none."""
    ok = attainment >= target
    first_miss = int(np.argmin(ok)) if not ok.all() else rates.size
    return float(rates[first_miss - 1]) if first_miss > 0 else 0.0


@dataclass(frozen=True)
class DisaggResult:
    """Colocated against every P:D split on one workload, and the KV each request moves."""

    params: DisaggParams
    rates_per_gpu: np.ndarray           # (points,) offered requests/s per GPU
    attainment: dict                    # "colocated" or "P:D" -> (points,) share meeting both limits
    goodput_per_gpu: dict               # the same keys -> requests/s per GPU (0: not even the lowest rate)
    best_split: tuple                   # (P, D) with the highest goodput per GPU (ties: fewer GPUs)
    best: str                           # its key
    capacities: Capacities              # the bounds above which every request counts as late
    kv_bytes_per_token: float
    kv_bytes: float                     # of a prompt of prompt_tokens
    transfer_s: dict                    # link -> seconds to move that KV
    prefill_s: float                    # that prompt's prefill alone on the GPU
    prompt_sweep: np.ndarray            # (n,) prompt lengths
    prefill_sweep_s: np.ndarray         # (n,) their prefill alone
    transfer_sweep_s: dict              # link -> (n,) their KV's transfer
    model: str
    gpu: str
    calibration_note: str


def disagg(params: DisaggParams = DisaggParams()) -> DisaggResult:
    """Attainment against offered rate per GPU for the colocated GPU and each P:D split,
    their goodput per GPU, and the KV transfer of a request by link."""
    p = params
    m, g = get_model(p.model), get_gpu(p.gpu)
    per_token = kv_bytes_per_token(m)
    cost = step_cost(p.model, p.gpu, Precision())
    sweep = np.unique(np.round(np.geomspace(TRANSFER_MIN, TRANSFER_MAX, 33)).astype(np.int64))
    pre = full_prefill_s(cost, m.num_layers, np.concatenate([[p.prompt_tokens], sweep]))
    links = {name: link_bytes_per_s(name, p.gpu) for name in LINK_NAMES}
    transfer = {name: float(p.prompt_tokens * per_token / b) for name, b in links.items()}
    key = replace(p, ttft_slo_s=DisaggParams.ttft_slo_s, tpot_slo_s=DisaggParams.tpot_slo_s, link="ib400")
    caps = capacities(key)
    rates = np.geomspace(caps.colocated * 1.25 / 16, caps.colocated * 1.25, p.points)
    colocated = _colocated_runs(key, tuple(float(r) for r in rates[rates < caps.colocated]))
    ttft_col = np.full((rates.size, p.requests), np.inf)
    tpot_col = np.full((rates.size, p.requests), np.inf)
    for i, c in enumerate(colocated):
        ttft_col[i], tpot_col[i] = c.ttft_s, c.tpot_s
    attainment = {"colocated": _attained(p, ttft_col, tpot_col)}
    lo_mult, hi_mult = p.max_gpus / (p.max_gpus - 1), float(p.max_gpus)
    prefill = _pool_runs(key, "prefill", float(rates[0] * lo_mult), float(rates[-1] * hi_mult))
    decode = _pool_runs(key, "decode", float(rates[0] * lo_mult), float(rates[-1] * hi_mult))
    moved = _lengths(key)[0] * per_token / links[p.link]
    for s in splits(p.max_gpus):
        n = s[0] + s[1]
        ttft = _at(prefill, rates * n / s[0]) + moved
        tpot = _at(decode, rates * n / s[1])
        attainment[split_key(s)] = _attained(p, ttft, tpot)
    goodput = {k: _goodput(rates, a, p.target_attainment) for k, a in attainment.items()}
    best = max(splits(p.max_gpus), key=lambda s: (goodput[split_key(s)], -(s[0] + s[1])))
    return DisaggResult(
        p, rates, attainment, goodput, best, split_key(best), caps, per_token, p.prompt_tokens * per_token, transfer,
        float(pre[0]), sweep, pre[1:], {name: sweep * per_token / b for name, b in links.items()},
        m.display_name, g.display_name, cost.calibration.note)
