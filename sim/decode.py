"""Decode step by step (figure ch00-decode-meter) and the two phases of a request (figure ch02-phases).

The decode meter follows successive decode steps: the bytes each reads, the FLOPs it
does and how busy that leaves the tensor cores; without a KV cache every step pushes
the whole prefix through the model again. The phases figure times one request's
prefill (compute-bound) against its decode steps (memory-bound).

>>> r = phase_times()
>>> r.prefill_bound, r.decode_bound
('compute', 'memory')
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from sim.batch import Batch, Precision
from sim.checks import check_int, checked_params
from sim.forward import StepCost, context_where_kv_reads_equal_weights, forward_pass
from sim.hardware import GPU
from sim.hardware import resolve as resolve_gpu
from sim.kernel_model import Calibration
from sim.models import ModelConfig
from sim.models import resolve as resolve_model
from sim.ops import attention_spec, fixed_specs
from sim.roofline import ridge_point


# --------------------------------------------------------------------------------------------
# Figure ch00-decode-meter
# --------------------------------------------------------------------------------------------

@checked_params
@dataclass(frozen=True)
class DecodeMeterParams:
    """Controls of the decode meter: step through decode passes."""

    model: str = "llama-3.1-8b"
    gpu: str = "H100-SXM"
    batch: int = 1                      # users decoding together
    prompt_tokens: int = 512            # tokens in each user's cache before the first step
    steps: int = 32                     # decode steps to show
    precision: Precision = Precision()
    cuda_graphs: bool = True            # a decode step replayed as one graph (R2)
    kv_cache: bool = True               # False: no cache, every step recomputes the whole prefix

    def __post_init__(self) -> None:
        check_int("batch", self.batch, minimum=1)
        check_int("prompt_tokens", self.prompt_tokens, minimum=0)
        check_int("steps", self.steps, minimum=1, maximum=100_000)
        if not isinstance(self.kv_cache, bool):
            raise ValueError(f"kv_cache must be True or False, got {self.kv_cache!r}")


@dataclass(frozen=True)
class DecodeMeterResult:
    """Per decode step: bytes read vs FLOPs done, and how busy the tensor cores are."""

    step: np.ndarray                     # (steps,) 1, 2, ...
    context_tokens: np.ndarray           # (steps,) cached tokens per user at each step
    step_time_s: np.ndarray              # (steps,)
    bytes_per_step: np.ndarray           # (steps,) all HBM traffic
    weight_bytes_per_step: np.ndarray    # (steps,)
    kv_bytes_per_step: np.ndarray        # (steps,)
    flops_per_step: np.ndarray           # (steps,)
    flops_per_byte: np.ndarray           # (steps,)
    tensor_core_utilisation: np.ndarray  # (steps,) FLOPs / (step time x peak FLOP/s)
    bandwidth_utilisation: np.ndarray    # (steps,) bytes / (step time x peak bandwidth)
    cumulative_time_s: np.ndarray        # (steps,)
    cumulative_bytes: np.ndarray         # (steps,)
    tokens_generated: np.ndarray         # (steps,) batch x step
    memory_floor_s: np.ndarray           # (steps,) bytes / peak bandwidth
    compute_floor_s: np.ndarray          # (steps,) FLOPs / peak FLOP/s
    tokens_per_s_per_user: float         # mean over the steps
    tokens_per_s_total: float
    peak_flops_per_s: float
    peak_bandwidth_bytes_per_s: float
    calibration_note: str
    model: str                           # display name
    memory_bytes: int                    # device memory as the driver reports it (MiB x 2**20)
    memory_label: str                    # the datasheet's marketing figure, e.g. "80 GB"


def decode_meter(params: DecodeMeterParams = DecodeMeterParams(),
                 calibration: Optional[Calibration] = None) -> DecodeMeterResult:
    """Bytes, FLOPs, time and tensor-core utilisation of successive decode steps.

    Step s has every user holding prompt_tokens + s - 1 cached tokens. Bytes and FLOPs
    are affine in the context (weights fixed, KV reads growing), so they are computed
    exactly from two forward passes; times come from `StepCost`.

    With `kv_cache=False` nothing is kept between steps: step s pushes the whole prefix,
    prompt_tokens + s tokens per user, through the model again to get one new token
    (R14). Its FLOPs grow with the prefix (attention's with its square), the step turns
    compute-bound, and the total time grows with the square of the length.

    >>> r = decode_meter()
    >>> bool(r.tensor_core_utilisation.max() < 0.01)     # one user: well under 1%
    True
    >>> nc = decode_meter(DecodeMeterParams(kv_cache=False))
    >>> bool(nc.step_time_s[-1] > nc.step_time_s[0] > 2 * r.step_time_s[0])
    True
    """
    p = params
    m, g = resolve_model(p.model), resolve_gpu(p.gpu)
    cost = StepCost(m, g, p.precision, calibration, p.cuda_graphs)
    steps = np.arange(1, p.steps + 1)
    ctx = p.prompt_tokens + steps - 1
    if not p.kv_cache:
        return _recompute_meter(p, m, g, cost, steps, ctx)
    f0 = forward_pass(m, g, Batch.decode(p.batch, int(ctx[0])), p.precision, cost.calibration, p.cuda_graphs)
    f1 = forward_pass(m, g, Batch.decode(p.batch, int(ctx[0]) + 1), p.precision, cost.calibration, p.cuda_graphs)
    dc = ctx - ctx[0]

    def affine(a0: float, a1: float) -> np.ndarray:
        return a0 + (a1 - a0) * dc

    total = affine(f0.bytes, f1.bytes)
    weights = affine(f0.weight_bytes, f1.weight_bytes)
    kv = affine(f0.kv_bytes, f1.kv_bytes)
    flops = affine(f0.flops, f1.flops)
    times = cost.decode_times_s(p.batch, ctx)
    return _meter_result(p, m, g, cost, steps, ctx, times, total, weights, kv, flops)


def _recompute_meter(p: DecodeMeterParams, m: ModelConfig, g: GPU, cost: StepCost, steps: np.ndarray,
                     ctx: np.ndarray) -> DecodeMeterResult:
    """The decode meter without a KV cache: step s runs the whole prefix (ctx + 1 tokens per user)."""
    n = (ctx + 1).astype(np.int64)               # tokens each user pushes through the model (int64: token x width
                                                 # products pass 2**31, and numpy's default int is 32-bit in wasm)
    B = p.batch
    specs = fixed_specs(m, p.precision, B * n, B)
    specs.append(attention_spec(m, p.precision, B * n, B * n * (n + 1) // 2, B * n))   # causal over the prefix
    zero = np.zeros(len(n))
    flops = sum((s.count * s.flops for s in specs), zero)
    weights = sum((s.count * s.weight_bytes for s in specs), zero)
    kv = sum((s.count * s.kv_bytes for s in specs), zero)
    total = weights + kv + sum((s.count * s.act_bytes for s in specs), zero)
    cost.prime(tokens=B * n, logits=[B])
    times = np.array([cost.uniform_time_s(B, int(k), 0, logits_seqs=B) for k in n])
    return _meter_result(p, m, g, cost, steps, np.zeros_like(ctx), times, total, weights, kv, flops)


def _meter_result(p: DecodeMeterParams, m: ModelConfig, g: GPU, cost: StepCost, steps: np.ndarray,
                  ctx: np.ndarray, times: np.ndarray, total: np.ndarray, weights: np.ndarray, kv: np.ndarray,
                  flops: np.ndarray) -> DecodeMeterResult:
    """The meter's result from per-step times, bytes (all, weights, KV) and FLOPs, at peak FLOP/s and bandwidth."""
    peak_f = g.peak_flops(p.precision.math_dtype)
    bw = g.hbm_bandwidth_bytes_per_s
    cum_t = np.cumsum(times)
    return DecodeMeterResult(
        step=steps, context_tokens=ctx, step_time_s=times, bytes_per_step=total,
        weight_bytes_per_step=weights, kv_bytes_per_step=kv, flops_per_step=flops,
        flops_per_byte=flops / total, tensor_core_utilisation=flops / (times * peak_f),
        bandwidth_utilisation=total / (times * bw), cumulative_time_s=cum_t,
        cumulative_bytes=np.cumsum(total), tokens_generated=steps * p.batch,
        memory_floor_s=total / bw, compute_floor_s=flops / peak_f,
        tokens_per_s_per_user=float(p.steps / cum_t[-1]), tokens_per_s_total=float(p.batch * p.steps / cum_t[-1]),
        peak_flops_per_s=peak_f, peak_bandwidth_bytes_per_s=bw, calibration_note=cost.calibration.note,
        model=m.display_name, memory_bytes=g.memory_bytes, memory_label=g.memory_label)



# --------------------------------------------------------------------------------------------
# Figure ch02-phases
# --------------------------------------------------------------------------------------------

@checked_params
@dataclass(frozen=True)
class PhaseParams:
    """Controls of the two-phases figure."""

    model: str = "llama-3.1-8b"
    gpu: str = "H100-SXM"
    prompt_tokens: int = 1024
    output_tokens: int = 256
    batch: int = 1                      # conversations decoding together
    precision: Precision = Precision()
    cuda_graphs: bool = True            # decode steps replayed as graphs; prefill launches kernels

    def __post_init__(self) -> None:
        check_int("prompt_tokens", self.prompt_tokens, minimum=1)
        check_int("output_tokens", self.output_tokens, minimum=1)
        check_int("batch", self.batch, minimum=1)


@dataclass(frozen=True)
class PhaseResult:
    """Time of prefill and of decode for one request (or `batch` identical ones)."""

    prefill_time_s: float               # the whole prompt in one pass; it also yields output token 1
    decode_time_s: float                # output tokens 2..n, one step each
    total_time_s: float
    decode_step_time_s: np.ndarray      # (output_tokens - 1,)
    prefill_flops: float
    prefill_bytes: float
    prefill_intensity_flop_per_byte: float
    prefill_bound: str
    decode_flops_per_step: float        # first decode step
    decode_bytes_per_step: float        # first decode step
    decode_intensity_flop_per_byte: float
    decode_bound: str
    prefill_tokens_per_s: float         # prompt tokens processed per second
    decode_tokens_per_s_per_user: float
    time_per_prompt_token_s: float
    time_per_output_token_s: float      # mean decode step
    kv_equals_weights_context_tokens: float  # context at which a decode step reads as much cache as weights
    ridge_flop_per_byte: float          # peak FLOP/s over peak bandwidth of the GPU (bf16)
    model: str                          # display name
    gpu: str                            # display name
    calibration_note: str


def phase_times(params: PhaseParams = PhaseParams(), calibration: Optional[Calibration] = None) -> PhaseResult:
    """Prefill time (compute-bound: each weight reused across the prompt) vs decode time (memory-bound).

    Prefill processes all prompt tokens of all `batch` requests in one pass; its logits
    give the first output token (R1, R2). Decode then runs output_tokens - 1 steps, the
    cache growing by one token per step: each step reads the weights and the whole cache,
    so its time grows with the context, slowly while the cache is small next to the
    weights and in proportion once it passes `kv_equals_weights_context_tokens`.

    >>> r = phase_times()
    >>> r.prefill_bound, r.decode_bound
    ('compute', 'memory')
    """
    p = params
    m, g = resolve_model(p.model), resolve_gpu(p.gpu)
    pre = forward_pass(m, g, Batch.prefill(p.prompt_tokens, p.batch), p.precision, calibration, cuda_graphs=False)
    cost = StepCost(m, g, p.precision, calibration, p.cuda_graphs)
    ctx = p.prompt_tokens + np.arange(p.output_tokens - 1)
    steps = cost.decode_times_s(p.batch, ctx)
    dec = forward_pass(m, g, Batch.decode(p.batch, p.prompt_tokens), p.precision, cost.calibration, p.cuda_graphs)
    decode_time = float(steps.sum())
    total = pre.time_s + decode_time
    return PhaseResult(
        prefill_time_s=pre.time_s, decode_time_s=decode_time, total_time_s=total, decode_step_time_s=steps,
        prefill_flops=pre.flops, prefill_bytes=pre.bytes, prefill_intensity_flop_per_byte=pre.intensity_flop_per_byte,
        prefill_bound=pre.bound, decode_flops_per_step=dec.flops, decode_bytes_per_step=dec.bytes,
        decode_intensity_flop_per_byte=dec.intensity_flop_per_byte, decode_bound=dec.bound,
        prefill_tokens_per_s=p.prompt_tokens * p.batch / pre.time_s,
        decode_tokens_per_s_per_user=(len(steps) / decode_time) if len(steps) else math.nan,
        time_per_prompt_token_s=pre.time_s / (p.prompt_tokens * p.batch),
        time_per_output_token_s=float(steps.mean()) if len(steps) else math.nan,
        kv_equals_weights_context_tokens=context_where_kv_reads_equal_weights(m, p.batch, p.precision),
        ridge_flop_per_byte=ridge_point(g), model=m.display_name, gpu=g.display_name,
        calibration_note=cost.calibration.note)
