"""KV cache: its size, the memory budget left for it, and how many sequences fit.

Every layer keeps a key and a value vector per KV head for every token seen, so

    bytes = 2 x layers x kv_heads x head_dim x tokens x batch x bytes_per_elem

Llama 3.1 8B (32 layers, 8 KV heads of 128) at 8,192 tokens in fp16 is exactly 1 GiB;
Llama 3.1 70B (80 layers, 8 KV heads of 128, R5) at 131,072 tokens is 40 GiB (320 KiB a token).

>>> kv_cache_bytes(layers=32, kv_heads=8, head_dim=128, seq_len=8192) == 2 ** 30
True
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Union

import numpy as np

from sim.batch import Batch, Precision
from sim.batching import batch_grid
from sim.checks import check_choice, check_int, check_non_negative, check_positive, check_range, checked_params
from sim.dtypes import bytes_per_elem
from sim.forward import (StepCost, context_where_kv_reads_equal_weights,  # noqa: F401 (chapters call it as sim.kv's)
                         forward_pass, stored_weight_bytes)
from sim.hardware import resolve as resolve_gpu
from sim.kv_blocks import blocks_for
from sim.kernel_model import Calibration
from sim.models import ModelConfig, weight_bytes
from sim.models import resolve as resolve_model

GiB = 2 ** 30
ATTENTION_KINDS = ("model", "mha", "gqa", "mqa")
GQA_KV_HEADS = 8                    # R15: GQA with 8 KV heads (groups) stays close to MHA quality
VLLM_GPU_MEMORY_UTILIZATION = 0.9   # vLLM engine argument gpu_memory_utilization, default 0.9 (vLLM docs)
ACTIVATION_RESERVE_BYTES = 2 * GiB  # assumed: activation peak, workspaces and CUDA graphs kept out of the KV budget
                                    # (vLLM measures its own with a profiling forward pass; 2 GiB is the guide's stand-in)


def kv_cache_bytes(layers: int, kv_heads: int, head_dim: int, seq_len: int, batch: int = 1,
                   bytes_per_elem: float = 2) -> float:
    """Bytes of the KV cache: 2 (K and V) x layers x kv_heads x head_dim x seq_len x batch x bytes_per_elem.

    Returns an int when the product is whole (always, for widths of 1 byte or more).

    >>> kv_cache_bytes(80, 8, 128, 131072) / 2 ** 30        # Llama 3.1 70B at 128K tokens
    40.0
    """
    check_int("layers", layers, minimum=1)
    check_int("kv_heads", kv_heads, minimum=1)
    check_int("head_dim", head_dim, minimum=1)
    check_int("seq_len", seq_len, minimum=0)
    check_int("batch", batch, minimum=0)
    check_positive("bytes_per_elem", bytes_per_elem)
    elems = 2 * int(layers) * int(kv_heads) * int(head_dim) * int(seq_len) * int(batch)
    total = elems * bytes_per_elem
    return int(total) if float(total).is_integer() else float(total)


def kv_heads_for(model: Union[str, ModelConfig], attention: str = "model") -> int:
    """KV heads under an attention variant: "model" (as trained), "mha" (one per query head),
    "gqa" (8 KV heads, R15), "mqa" (a single KV head).

    >>> [kv_heads_for("llama-3.1-8b", a) for a in ATTENTION_KINDS]
    [8, 32, 8, 1]
    """
    m = resolve_model(model)
    check_choice("attention", attention, ATTENTION_KINDS, "attention kinds")
    return {"model": m.num_kv_heads, "mha": m.num_heads, "gqa": min(GQA_KV_HEADS, m.num_heads),
            "mqa": 1}[attention]


def kv_bytes_per_token(model: Union[str, ModelConfig], kv_dtype: str = "bf16", attention: str = "model") -> float:
    """Cache bytes one token adds across all layers: 2 x layers x kv_heads x head_dim x width.

    >>> kv_bytes_per_token("llama-3.1-8b") / 1024          # 128 KiB per token
    128.0
    """
    m = resolve_model(model)
    return float(kv_cache_bytes(m.num_layers, kv_heads_for(m, attention), m.head_dim, 1, 1, bytes_per_elem(kv_dtype)))


def sequences_that_fit(budget_bytes: float, model: Union[str, ModelConfig], context_tokens: int,
                       kv_dtype: str = "bf16", block_size: Optional[int] = None) -> int:
    """How many sequences of `context_tokens` tokens fit in a KV budget of `budget_bytes`.

    With `block_size`, each sequence occupies whole blocks (ceil(context / block) blocks).

    >>> sequences_that_fit(40 * 2 ** 30, "llama-3.1-70b", 4096), sequences_that_fit(40 * 2 ** 30, "llama-3.1-70b", 4096, "fp8")
    (32, 64)
    """
    check_non_negative("budget_bytes", budget_bytes)
    check_int("context_tokens", context_tokens, minimum=1)
    tokens = context_tokens
    if block_size is not None:
        check_int("block_size", block_size, minimum=1)
        tokens = blocks_for(context_tokens, block_size) * block_size
    per_seq = tokens * kv_bytes_per_token(model, kv_dtype)
    return int(budget_bytes // per_seq)


def kv_budget_bytes(model: Union[str, ModelConfig], gpu, precision: Optional[Precision] = None,
                    memory_utilisation: float = VLLM_GPU_MEMORY_UTILIZATION,
                    reserve_bytes: float = ACTIVATION_RESERVE_BYTES) -> float:
    """Device memory left for the KV cache: utilisation x driver-reported memory - weights - reserve (>= 0).

    vLLM's accounting: the engine may use `gpu_memory_utilization` of the device (0.9 by
    default), loads the weights, keeps its profiled activation peak, and gives the rest to
    the cache; here the activation peak is the stated `reserve_bytes`.

    >>> round(kv_budget_bytes("llama-3.1-8b", "H100-SXM") / 1e9, 2)     # 0.9 x 85.52 - 16.06 - 2.15 GB
    58.76
    """
    m = resolve_model(model)
    return deployment_kv_budget_bytes(gpu, stored_weight_bytes(m, precision), 1, memory_utilisation, reserve_bytes)


def deployment_kv_budget_bytes(gpu, weight_bytes: float, gpus: int = 1,
                               memory_utilisation: float = VLLM_GPU_MEMORY_UTILIZATION,
                               reserve_bytes: float = ACTIVATION_RESERVE_BYTES) -> float:
    """`kv_budget_bytes`'s accounting for `weight_bytes` of weights spread over `gpus` GPUs, each
    giving utilisation x its memory less the reserve (a model outside the catalogue too) (>= 0).

    >>> deployment_kv_budget_bytes("H100-SXM", 16.06e9) == deployment_kv_budget_bytes("H100-SXM", 32.12e9, 2) / 2
    True
    """
    check_range("memory_utilisation", memory_utilisation, 0.0, 1.0)
    check_non_negative("reserve_bytes", reserve_bytes)
    check_int("gpus", gpus, minimum=1)
    g = resolve_gpu(gpu)
    return max(gpus * (memory_utilisation * g.memory_bytes - reserve_bytes) - weight_bytes, 0.0)


def kv_capacity_tokens(model: Union[str, ModelConfig], gpu, precision: Optional[Precision] = None) -> int:
    """KV tokens that fit in the KV budget (`kv_budget_bytes`: vLLM's accounting); ValueError if the weights do not.

    >>> kv_capacity_tokens("llama-3.1-8b", "H100-SXM")      # 58.76 GB / 128 KiB
    448308
    """
    m, g, p = resolve_model(model), resolve_gpu(gpu), precision or Precision()
    budget = kv_budget_bytes(m, g, p)
    if budget <= 0:
        raise ValueError(f"{m.display_name} weights do not fit on {g.display_name}")
    return int(budget // kv_bytes_per_token(m, p.kv_dtype))


# --------------------------------------------------------------------------------------------
# Figure ch06-kv-size
# --------------------------------------------------------------------------------------------

@checked_params
@dataclass(frozen=True)
class KVSizeParams:
    """Controls of the KV-size figure."""

    model: str = "llama-3.1-8b"
    context_tokens: int = 8192          # tokens per conversation
    batch: int = 1                      # conversations held at once
    kv_dtype: str = "bf16"              # "bf16" | "fp16" | "fp8"
    attention: str = "model"            # "model" | "mha" | "gqa" | "mqa"
    weight_dtype: str = "bf16"          # for the weights the cache is compared with
    grid_points: int = 64               # samples of the cache-size-vs-context curve

    def __post_init__(self) -> None:
        check_int("context_tokens", self.context_tokens, minimum=1)
        check_int("batch", self.batch, minimum=1)
        bytes_per_elem(self.kv_dtype)
        bytes_per_elem(self.weight_dtype)
        check_choice("attention", self.attention, ATTENTION_KINDS, "attention kinds")
        check_int("grid_points", self.grid_points, minimum=2)


@dataclass(frozen=True)
class KVSizeResult:
    """Cache size for a model, context and batch, compared with the weights."""

    kv_bytes: float                      # whole cache
    weight_bytes: float                  # all weights at weight_dtype
    kv_over_weights: float
    kv_heads: int
    bytes_per_token: float
    batch_where_kv_exceeds_weights: int  # fewest conversations at this context whose cache outweighs the model
    attention_kinds: list                # ["mha", "gqa", "mqa"]
    kv_bytes_by_attention: np.ndarray    # (3,) cache at this context and batch under each variant
    context_grid_tokens: np.ndarray      # (grid_points,) 1 .. max(context, model's max context)
    kv_bytes_grid: np.ndarray            # (grid_points,) cache at this batch for each context
    kv_heads_by_attention: list          # (3,) KV heads under each variant of attention_kinds
    query_heads: int
    note: str                            # the model's shapes, their source and the formula


def kv_size(params: KVSizeParams = KVSizeParams()) -> KVSizeResult:
    """Cache bytes for (model, context, batch, KV dtype, attention variant) vs the model's weights.

    >>> r = kv_size()                     # Llama 3.1 8B, 8,192 tokens, bf16
    >>> r.kv_bytes == 2 ** 30, r.batch_where_kv_exceeds_weights
    (True, 15)
    """
    p = params
    m = resolve_model(p.model)
    per_token = kv_bytes_per_token(m, p.kv_dtype, p.attention)
    kv = per_token * p.context_tokens * p.batch
    w = weight_bytes(m, p.weight_dtype)
    per_conv = per_token * p.context_tokens
    kinds = ["mha", "gqa", "mqa"]
    by_kind = np.array([kv_bytes_per_token(m, p.kv_dtype, k) * p.context_tokens * p.batch for k in kinds])
    top = max(p.context_tokens, m.max_context_tokens or p.context_tokens)
    grid = np.unique(np.geomspace(1, top, p.grid_points).round().astype(np.int64))
    return KVSizeResult(
        kv_bytes=float(kv), weight_bytes=w, kv_over_weights=kv / w, kv_heads=kv_heads_for(m, p.attention),
        bytes_per_token=per_token, batch_where_kv_exceeds_weights=int(math.floor(w / per_conv)) + 1,
        attention_kinds=kinds, kv_bytes_by_attention=by_kind, context_grid_tokens=grid,
        kv_bytes_grid=grid * per_token * p.batch, kv_heads_by_attention=[kv_heads_for(m, k) for k in kinds],
        query_heads=m.num_heads,
        note=(f"{m.display_name}: {m.num_layers} layers, {m.num_heads} query heads, {m.num_kv_heads} KV heads of "
              f"{m.head_dim} ({m.source}). Bytes = 2 (K and V) x layers x KV heads x head dim x tokens x "
              f"conversations x bytes per element; weights in {p.weight_dtype}. GB = 10^9 bytes, GiB = 2^30 bytes."))


# --------------------------------------------------------------------------------------------
# Figure ch06-kv-budget
# --------------------------------------------------------------------------------------------

@checked_params
@dataclass(frozen=True)
class KVBudgetParams:
    """Controls of the KV-budget figure."""

    model: str = "llama-3.1-8b"
    gpu: str = "H100-SXM"
    context_tokens: int = 4096          # tokens per sequence
    memory_utilisation: float = VLLM_GPU_MEMORY_UTILIZATION  # share of device memory the engine may use
    reserve_bytes: float = ACTIVATION_RESERVE_BYTES  # kept for activations and workspaces, not the cache
    budget_bytes: Optional[float] = None  # KV budget; None: utilisation x memory - weights - reserve
    precision: Precision = Precision()
    block_size: int = 16                # vLLM engine argument block_size, default 16 on CUDA (vLLM docs)
    grid_points: int = 48               # batch sizes on the step-time curve
    cuda_graphs: bool = True

    def __post_init__(self) -> None:
        check_int("context_tokens", self.context_tokens, minimum=1)
        check_range("memory_utilisation", self.memory_utilisation, 0.0, 1.0)
        check_non_negative("reserve_bytes", self.reserve_bytes)
        if self.budget_bytes is not None:
            check_non_negative("budget_bytes", self.budget_bytes)
        check_int("block_size", self.block_size, minimum=1)
        check_int("grid_points", self.grid_points, minimum=2)


@dataclass(frozen=True)
class KVBudgetResult:
    """How many sequences fit, and how decode slows as their cache reads grow."""

    device_bytes: float                  # driver-reported capacity (MiB x 2**20)
    weight_bytes: float
    reserve_bytes: float                 # activations and workspaces, kept out of the budget
    budget_bytes: float                  # memory left for the KV cache
    kv_bytes_per_sequence: float         # whole blocks at context_tokens
    max_sequences: int                   # sequences that fit in the budget
    batch_grid: np.ndarray               # (n,) 1 .. max(max_sequences, 1)
    step_time_s: np.ndarray              # (n,) decode step at that batch and context
    weight_bytes_read: np.ndarray        # (n,) per step
    kv_bytes_read: np.ndarray            # (n,) per step
    kv_share_of_reads: np.ndarray        # (n,) kv / (kv + weights)
    tokens_per_s_total: np.ndarray       # (n,)
    batch_where_kv_reads_equal_weights: float   # B at which cache reads match weight reads
    calibration_note: str
    model: str                           # display name
    gpu: str                             # display name
    memory_mib: int                      # device memory as the driver reports it
    memory_label: str                    # the datasheet's marketing figure, e.g. "80 GB"


def kv_budget(params: KVBudgetParams = KVBudgetParams(), calibration: Optional[Calibration] = None) -> KVBudgetResult:
    """Sequences that fit in device memory at a context length, and decode time as the cache grows.

    Budget = memory_utilisation x device memory - weights - reserve: vLLM's accounting
    (gpu_memory_utilization of the driver-reported memory, less the weights and the peak
    activation memory it profiles), with the activation peak replaced by a stated reserve.
    Each decode step reads all weights once and every sequence's cache, so cache reads
    rival weight reads once B x context x bytes/token ~ weight bytes.

    >>> r = kv_budget()          # Llama 3.1 8B on H100 at 4,096 tokens: 0.9 x 85.52 - 16.06 - 2.15 GB
    >>> round(r.budget_bytes / 1e9, 1), r.max_sequences
    (58.8, 109)
    """
    p = params
    m, g = resolve_model(p.model), resolve_gpu(p.gpu)
    wbytes = stored_weight_bytes(m, p.precision)
    budget = p.budget_bytes if p.budget_bytes is not None else kv_budget_bytes(
        m, g, p.precision, p.memory_utilisation, p.reserve_bytes)
    per_token = kv_bytes_per_token(m, p.precision.kv_dtype)
    per_seq = blocks_for(p.context_tokens, p.block_size) * p.block_size * per_token
    n_fit = int(budget // per_seq)
    grid = batch_grid(max(n_fit, 1), p.grid_points)
    cost = StepCost(m, g, p.precision, calibration, p.cuda_graphs)
    cost.prime(tokens=grid, logits=grid)
    times = np.array([cost.uniform_time_s(int(b), 1, p.context_tokens) for b in grid])
    # weights read per decode step: all linear weights plus the head (the embedding table is only gathered)
    f1 = forward_pass(m, g, Batch.decode(1, p.context_tokens), p.precision, cost.calibration, p.cuda_graphs)
    w_read = np.full(len(grid), f1.weight_bytes)
    kv_read = grid * f1.kv_bytes
    return KVBudgetResult(
        device_bytes=g.memory_bytes, weight_bytes=wbytes, reserve_bytes=p.reserve_bytes, budget_bytes=float(budget), kv_bytes_per_sequence=per_seq,
        max_sequences=n_fit, batch_grid=grid, step_time_s=times, weight_bytes_read=w_read, kv_bytes_read=kv_read,
        kv_share_of_reads=kv_read / (kv_read + w_read), tokens_per_s_total=grid / times,
        batch_where_kv_reads_equal_weights=f1.weight_bytes / f1.kv_bytes, calibration_note=cost.calibration.note,
        model=m.display_name, gpu=g.display_name, memory_mib=g.memory_mib, memory_label=g.memory_label)
