"""Pruning: magnitude pruning of weight matrices, and what the saved bytes predict for decode speed.

Unstructured pruning zeroes the smallest-magnitude weights anywhere (SparseGPT reached
60% on OPT-175B with little loss, R21); 2:4 ("semi-structured") pruning keeps the 2
largest of every 4 consecutive weights, a pattern sparse tensor cores run at twice the
math rate (R22). The stored form of a 2:4 matrix is the kept values plus a 2-bit index
for each, i.e. values / 2 + 1 bit of metadata per original weight.

The bytes model compares four ways to store the blocks' linear weights - dense bf16,
4-bit (group-128 fp16 scales), 2:4 bf16 and 2:4 + 4-bit - and predicts a single-user
decode speedup from the bytes a step reads. Parts that do not shrink (the output head,
embeddings rows, KV-cache reads, activations, launch overheads, and whatever the serving
engine spends per step outside the GPU kernels) cap the real gain: Red Hat's 2:4 + 4-bit
Llama 3.1 8B decoded 2.1-3.0x faster for one user (R23). `overhead_to_match` gives the
fixed per-step cost that would close the gap between the model and that measurement.

>>> w = np.array([[0.1, -0.5, 0.2, 0.05, 1.0, -2.0, 0.3, 0.0]])
>>> prune_2_4(w).tolist()
[[0.0, -0.5, 0.2, 0.0, 1.0, -2.0, 0.0, 0.0]]
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from sim.batch import Batch, Precision
from sim.calibration import for_gpu
from sim.checks import check_int, check_non_negative, check_range, checked_params
from sim.forward import forward_pass
from sim.hardware import resolve as resolve_gpu
from sim.kernel_model import Calibration
from sim.models import resolve as resolve_model

META_BITS_PER_KEPT_VALUE = 2     # R22: a 2-bit position index for each kept value of a 2:4 group
R23_MEASURED_SPEEDUP_RANGE = (2.1, 3.0)   # R23: 2:4 + 4-bit Llama 3.1 8B, single user, A5000/A6000/A100
R23_MEASURED_VARIANT = "2:4 + 4-bit"
R23_MEASURED_GPUS = ("A5000", "A6000", "A100")


def prune_unstructured(w, sparsity: float) -> np.ndarray:
    """Zero the round(sparsity x size) smallest-magnitude entries of `w` (ties broken by position).

    >>> prune_unstructured([3.0, -1.0, 2.0, 0.5], 0.5).tolist()
    [3.0, 0.0, 2.0, 0.0]
    """
    check_range("sparsity", sparsity, 0.0, 1.0)
    a = np.array(w, dtype=np.float64, copy=True)
    k = int(round(sparsity * a.size))
    if k:
        order = np.argsort(np.abs(a).ravel(), kind="stable")
        a.ravel()[order[:k]] = 0.0
    return a


def prune_2_4(w) -> np.ndarray:
    """Keep the 2 largest-magnitude of every 4 consecutive weights along the last axis (R22).

    The last axis (input features) must be a multiple of 4. Ties keep the earlier weight.

    >>> prune_2_4([1.0, 1.0, 1.0, 1.0]).tolist()
    [1.0, 1.0, 0.0, 0.0]
    """
    a = np.array(w, dtype=np.float64, copy=True)
    if a.ndim == 0 or a.shape[-1] % 4:
        raise ValueError(f"2:4 pruning needs the last axis to be a multiple of 4, got shape {a.shape}")
    g = a.reshape(-1, 4)
    order = np.argsort(-np.abs(g), axis=1, kind="stable")
    mask = np.zeros_like(g, dtype=bool)
    np.put_along_axis(mask, order[:, :2], True, axis=1)
    return np.where(mask, g, 0.0).reshape(a.shape)


def is_2_4_sparse(w) -> bool:
    """True when every group of 4 consecutive weights along the last axis has at most 2 non-zeros.

    >>> is_2_4_sparse([1, 0, 2, 0, 0, 0, 0, 3]), is_2_4_sparse([1, 2, 3, 0])
    (True, False)
    """
    a = np.asarray(w)
    if a.ndim == 0 or a.shape[-1] % 4:
        return False
    return bool(((a.reshape(-1, 4) != 0).sum(axis=1) <= 2).all())


# --------------------------------------------------------------------------------------------
# Bytes model (figure ch11-pruning)
# --------------------------------------------------------------------------------------------

VARIANTS = ("dense bf16", "4-bit", "2:4 bf16", "2:4 + 4-bit")


def bytes_per_weight(variant: str, quant_group_size: int = 128, scale_bytes: float = 2.0) -> float:
    """Stored bytes per original (dense) weight of the blocks' linear layers.

    - dense bf16: 2
    - 4-bit: 0.5 + scale_bytes / group
    - 2:4 bf16: half the values at 2 bytes + 2 index bits per kept value = 1 + 0.125
    - 2:4 + 4-bit: half the values at 0.5 bytes, each group of `quant_group_size` kept
      values sharing one scale, + 0.125 bytes of metadata

    >>> [round(bytes_per_weight(v), 4) for v in VARIANTS]
    [2.0, 0.5156, 1.125, 0.3828]
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; valid variants: {', '.join(VARIANTS)}")
    check_int("quant_group_size", quant_group_size, minimum=1)
    meta = 0.5 * META_BITS_PER_KEPT_VALUE / 8          # half the weights are kept
    if variant == "dense bf16":
        return 2.0
    if variant == "4-bit":
        return 0.5 + scale_bytes / quant_group_size
    if variant == "2:4 bf16":
        return 0.5 * 2.0 + meta
    return 0.5 * (0.5 + scale_bytes / quant_group_size) + meta


@checked_params
@dataclass(frozen=True)
class PruningParams:
    """Controls of the pruning figure."""

    model: str = "llama-3.1-8b"
    gpu: str = "A100-80GB"              # one of the GPUs R23 measured on
    context_tokens: int = 1024          # cached tokens of the single user
    quant_group_size: int = 128
    cuda_graphs: bool = True
    engine_overhead_s: float = 0.0      # per step, outside the GPU kernels (scheduling, sampling): an assumption

    LIMITS = {"engine_overhead_s": (10.0, "s")}

    def __post_init__(self) -> None:
        check_int("context_tokens", self.context_tokens, minimum=0)
        check_int("quant_group_size", self.quant_group_size, minimum=1)
        check_non_negative("engine_overhead_s", self.engine_overhead_s)


@dataclass(frozen=True)
class PruningResult:
    """Single-user decode under each storage variant, and the parts that do not shrink."""

    variants: list                      # VARIANTS
    bytes_per_weight: np.ndarray        # (4,) blocks' linear weights
    linear_weight_bytes: np.ndarray     # (4,) all blocks' linear weights
    weights_only_speedup: np.ndarray    # (4,) dense linear bytes / variant linear bytes
    step_bytes: np.ndarray              # (4,) all bytes one step moves (weights, KV, activations)
    bytes_speedup: np.ndarray           # (4,) dense step bytes / variant step bytes
    step_time_s: np.ndarray             # (4,) modelled decode step, engine overhead included
    predicted_speedup: np.ndarray       # (4,) dense step / variant step
    linear_weight_time_s: np.ndarray    # (4,) the part that shrinks: linear weights / bandwidth
    head_and_embedding_time_s: np.ndarray  # (4,) output head + embedding rows (kept in bf16)
    kv_time_s: np.ndarray               # (4,) KV-cache reads and writes
    activation_time_s: np.ndarray       # (4,) activations in and out of every kernel
    overhead_time_s: np.ndarray         # (4,) kernels beyond bytes / bandwidth: launches, compute, inefficiency
    engine_overhead_s: np.ndarray       # (4,) the assumed per-step cost outside the kernels
    measured_speedup_range: tuple       # R23 (2:4 + 4-bit, one user)
    measured_variant: str               # the variant R23 measured
    overhead_to_match_s: tuple          # engine overhead per step that would give R23's (high, low) speedup
    model_name: str
    gpu_name: str
    calibration_note: str


def overhead_to_match(dense_step_s: float, variant_step_s: float, speedup: float) -> float:
    """Fixed per-step cost h with (dense + h) / (variant + h) == speedup: h = (dense - s x variant) / (s - 1).

    0 when the modelled steps already give no more than `speedup`.

    >>> overhead_to_match(10.0, 2.0, 3.0)
    2.0
    """
    if speedup <= 1:
        raise ValueError(f"speedup must be > 1, got {speedup!r}")
    return max((dense_step_s - speedup * variant_step_s) / (speedup - 1), 0.0)


def predict_pruning_speedup(params: PruningParams = PruningParams(),
                            calibration: Optional[Calibration] = None) -> PruningResult:
    """Decode-step time of one user under dense / 4-bit / 2:4 / 2:4 + 4-bit linear weights.

    The stack splits each step's time by what the bytes are: linear weights (the only
    part that shrinks), head and embedding, KV cache, activations, what the kernels take
    beyond bytes / bandwidth (launches, compute, inefficiency), and an assumed engine
    overhead per step outside the kernels. Bytes alone predict the weights-only ratio;
    the step-level prediction is smaller because the other parts stay.

    >>> r = predict_pruning_speedup()
    >>> bool(r.weights_only_speedup[-1] > r.predicted_speedup[-1] > 1)
    True
    """
    p = params
    m, g = resolve_model(p.model), resolve_gpu(p.gpu)
    calib = calibration if calibration is not None else for_gpu(g)
    bw = calib.bandwidth_bytes_per_s
    batch = Batch.decode(1, p.context_tokens)
    rows = []
    for v in VARIANTS:
        bpw = bytes_per_weight(v, p.quant_group_size)
        prec = Precision(weight_bytes_per_elem=bpw, lm_head_dtype="bf16", sparse_2_4=v.startswith("2:4"))
        rows.append((bpw, forward_pass(m, g, batch, prec, calib, p.cuda_graphs)))
    bpws = np.array([r[0] for r in rows])
    linear = np.array([sum(o.weight_bytes * o.count for o in f.ops if o.kind == "gemm" and o.name != "lm_head")
                       for _, f in rows])
    head = np.array([sum(o.weight_bytes * o.count for o in f.ops if o.name in ("lm_head", "embed"))
                     for _, f in rows])
    norms = np.array([sum(o.weight_bytes * o.count for o in f.ops if o.kind == "elementwise"
                          and o.name != "embed") for _, f in rows])
    kv = np.array([f.kv_bytes for _, f in rows])
    act = np.array([f.act_bytes for _, f in rows]) + norms
    kernels = np.array([f.time_s for _, f in rows])
    step_bytes = np.array([f.bytes for _, f in rows])
    engine = np.full(len(rows), p.engine_overhead_s)
    step = kernels + engine
    t_lin, t_head, t_kv, t_act = linear / bw, head / bw, kv / bw, act / bw
    i = VARIANTS.index(R23_MEASURED_VARIANT)
    lo, hi = R23_MEASURED_SPEEDUP_RANGE
    return PruningResult(
        variants=list(VARIANTS), bytes_per_weight=bpws, linear_weight_bytes=linear,
        weights_only_speedup=linear[0] / linear, step_bytes=step_bytes, bytes_speedup=step_bytes[0] / step_bytes,
        step_time_s=step, predicted_speedup=step[0] / step,
        linear_weight_time_s=t_lin, head_and_embedding_time_s=t_head, kv_time_s=t_kv, activation_time_s=t_act,
        overhead_time_s=kernels - (t_lin + t_head + t_kv + t_act), engine_overhead_s=engine,
        measured_speedup_range=R23_MEASURED_SPEEDUP_RANGE, measured_variant=R23_MEASURED_VARIANT,
        overhead_to_match_s=(overhead_to_match(kernels[0], kernels[i], hi), overhead_to_match(kernels[0], kernels[i], lo)),
        model_name=m.display_name, gpu_name=g.display_name, calibration_note=calib.note)
