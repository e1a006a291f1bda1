"""The catalogue's GPUs side by side (chapter 22): their spec-sheet numbers, and what those
mean for one model through the guide's own step model.

Per GPU: dense tensor-core FLOP/s by format (the datasheets' sparse figures are twice these,
for weights pruned 2:4, R22), device memory as the driver reports it, memory bandwidth, the
ridge point (FLOP per byte where the tensor cores and the memory take equal time) in bf16
and in the arithmetic the deployment gets, NVLink per GPU; and for the chosen model and
format: one user's decode speed at a context, the prefill of one prompt, and the largest
batch whose KV cache fits at that context (vLLM's accounting, sim.kv.kv_budget_bytes).

The deployment is chapter 10's (sim.quant.deployment_precision): bf16, fp8 e4m3 with a
per-tensor scale, or NVFP4, weights and activations quantized, the matmuls on the format's
own tensor cores or on the next wider ones the GPU has (fp4 on Hopper runs in fp8, fp8 on
Ampere in bf16). Step times are sim.forward's: calibrated kernel timings where the guide has
them for a GPU, the spec-sheet fallback elsewhere (each row says which).

>>> r = gpu_compare()
>>> [row.name for row in r.rows][:2]
['H100-SXM', 'H200']
>>> round(r.rows[0].ridge_bf16)
295
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from sim import hardware, models
from sim.checks import check_choice, check_int, checked_params
from sim.forward import decode_step, prefill_pass, stored_weight_bytes
from sim.kv import kv_budget_bytes, sequences_that_fit
from sim.quant import KV_DTYPES, QuantScheme, bits_per_weight, deployment_precision

SCHEMES = {"bf16": None, "fp8": QuantScheme("fp8_e4m3", "tensor", scale_bits=32), "nvfp4": QuantScheme("nvfp4")}
SPARSE_FACTOR = 2.0          # 2:4 structured sparsity doubles the tensor-core rate (R22; every GPU here)


@checked_params
@dataclass(frozen=True)
class GpuCompareParams:
    """One model, its format, a context for decode and the KV budget, a prompt for prefill."""

    model: str = "llama-3.1-8b"
    weights: str = "bf16"            # "bf16", "fp8" or "nvfp4": weights and activations
    context_tokens: int = 4096       # each sequence's context when decoding (and in the KV budget)
    prompt_tokens: int = 4096        # the prompt whose prefill is timed
    kv_dtype: str = "bf16"

    def __post_init__(self) -> None:
        check_choice("model", self.model, models.names(), "models")
        check_choice("weights", self.weights, SCHEMES, "formats")
        check_int("context_tokens", self.context_tokens, minimum=1)
        check_int("prompt_tokens", self.prompt_tokens, minimum=1, maximum=2 ** 20)
        check_choice("kv_dtype", self.kv_dtype, KV_DTYPES, "KV dtypes")


@dataclass(frozen=True)
class GpuRow:
    """One GPU: its numbers, and the model on it."""

    name: str
    display_name: str
    arch: str
    dense_flops: dict                # format -> dense tensor-core FLOP/s (the datasheet's)
    memory_mib: int                  # as the driver reports it
    bandwidth_bytes_per_s: float
    ridge_bf16: float                # FLOP per byte where bf16 math and memory take equal time
    math_dtype: str                  # the matmuls' arithmetic for this deployment on this GPU
    ridge: float                     # the same in math_dtype
    nvlink_bytes_per_s: Optional[float]   # per GPU, both directions; None without NVLink
    weight_bytes: float              # the model as stored in this format
    fits: bool                       # the weights and a reserve fit in vLLM's share of memory
    decode_tokens_per_s: float       # one user, at context_tokens (NaN if it does not fit)
    prefill_s: float                 # one prompt of prompt_tokens (NaN if it does not fit)
    max_batch: int                   # sequences of context_tokens whose KV fits (0 if none)
    calibration_source: str          # "trace" | "carried-over" | "spec-sheet"
    calibration_note: str


@dataclass(frozen=True)
class GpuCompareResult:
    params: GpuCompareParams
    model: str                       # display name
    bits_per_weight: float
    rows: tuple                      # GpuRow per catalogue GPU, in the catalogue's order


def _row(p: GpuCompareParams, name: str) -> GpuRow:
    g = hardware.get(name)
    m = models.get(p.model)
    prec, math_dtype, _ = deployment_precision(SCHEMES[p.weights], g, "weights+activations", p.kv_dtype,
                                               m.hidden_size)
    budget = kv_budget_bytes(m, g, prec)
    fits = budget > 0
    decode = prefill = math.nan
    source = note = ""
    if fits:
        step = decode_step(m, g, 1, p.context_tokens, prec)
        decode = 1.0 / step.time_s
        prefill = prefill_pass(m, g, p.prompt_tokens, 1, prec).time_s
        source, note = step.calibration_source, step.calibration_note
    bw = g.hbm_bandwidth_bytes_per_s
    return GpuRow(name=name, display_name=g.display_name, arch=g.arch, dense_flops=dict(g.dense_flops),
                  memory_mib=g.memory_mib, bandwidth_bytes_per_s=bw, ridge_bf16=g.dense_flops["bf16"] / bw,
                  math_dtype=math_dtype, ridge=g.dense_flops[math_dtype] / bw,
                  nvlink_bytes_per_s=g.nvlink_bandwidth_bytes_per_s, weight_bytes=stored_weight_bytes(m, prec),
                  fits=fits, decode_tokens_per_s=decode, prefill_s=prefill,
                  max_batch=sequences_that_fit(budget, m, p.context_tokens, p.kv_dtype) if fits else 0,
                  calibration_source=source or "spec-sheet",
                  calibration_note=note or f"{m.display_name} does not fit on one {g.display_name}.")


def gpu_compare(params: GpuCompareParams = GpuCompareParams()) -> GpuCompareResult:
    """Every catalogue GPU's numbers, and `params.model` in `params.weights` on each."""
    m = models.get(params.model)
    scheme = SCHEMES[params.weights]
    bpw = 16.0 if scheme is None else bits_per_weight(scheme, None, m.hidden_size)    # as deployment_precision stores them
    return GpuCompareResult(params, m.display_name, bpw, tuple(_row(params, n) for n in hardware.names()))
