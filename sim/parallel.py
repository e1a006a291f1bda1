"""Spreading a model over GPUs: tensor (TP), pipeline (PP) and data (DP) parallelism.

- TP splits every weight matrix (and the KV heads) across the GPUs of one server: each
  GPU reads 1/TP of the weights per step, so bandwidth adds up, but every layer ends in
  two all-reduces of the activations (after attention and after the MLP, Megatron-LM,
  R33) over NVLink.
- PP gives each GPU a contiguous range of layers: it adds memory but a token still
  visits every stage in turn, so one user's step is not faster; stages talk over the
  network between servers (R32, R34).
- DP copies the whole deployment: more throughput, no more room per copy.

Ring all-reduce of `m` bytes over `tp` GPUs: latency + 2 (tp - 1) / tp x m / link
bandwidth (one direction); where the GPU's calibration has a measured all-reduce (fitted
to NCCL all-reduce timings inside one server, `sim.calibration.AllReduceParams`), that
replaces the assumed latency and link rate.

>>> plan_parallel(ParallelParams(model="llama-3.1-405b", weight_dtype="fp8")).gpus
8
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from sim.batch import Batch, Precision
from sim.calibration import for_gpu
from sim.checks import check_int, check_non_negative, check_positive, check_range, checked_params
from sim.dtypes import bytes_per_elem
from sim.forward import forward_pass, launched_step_time_s, stored_weight_bytes
from sim.hardware import resolve as resolve_gpu
from sim.kernel_model import Calibration
from sim.models import resolve as resolve_model

PCIE_GEN4_X16_BYTES_PER_S = 32e9     # PCI-SIG PCIe 4.0: 16 GT/s x 16 lanes ~ 32 GB/s each way (no-NVLink GPUs)
ALLREDUCE_LATENCY_S = 10e-6          # assumed fixed cost of one small all-reduce (launch + synchronisation)
INTERNODE_BYTES_PER_S = 50e9         # 400 Gb/s InfiniBand NDR per GPU (NVIDIA ConnectX-7), one way
INTERNODE_LATENCY_S = 10e-6          # assumed fixed cost of one stage-to-stage send


def allreduce_time_s(message_bytes: float, tp: int, link_bytes_per_s: float,
                     latency_s: float = ALLREDUCE_LATENCY_S) -> float:
    """Ring all-reduce: latency + 2 (tp - 1) / tp x bytes / one-way link bandwidth; 0 for tp = 1.

    >>> round(allreduce_time_s(450e6, 2, 450e9, 0.0), 6)
    0.001
    """
    check_non_negative("message_bytes", message_bytes)
    check_int("tp", tp, minimum=1)
    check_positive("link_bytes_per_s", link_bytes_per_s)
    if tp == 1:
        return 0.0
    return latency_s + 2.0 * (tp - 1) / tp * message_bytes / link_bytes_per_s


def _allreduce_s(cal: Calibration, message_bytes: float, tp: int, link_bytes_per_s: float) -> float:
    """One all-reduce: the GPU's calibrated collective model where it has one, else the ring model."""
    if cal.allreduce is not None:
        return cal.allreduce.time_s(message_bytes, tp)
    return allreduce_time_s(message_bytes, tp, link_bytes_per_s)


def _tp_busy_each_s(f, m, cal: Calibration, tp: int) -> list[float]:
    """Busy seconds of one instance of each op of forward pass `f` on one GPU of `tp`: GEMMs and
    attention split TP ways (KV heads replicated beyond num_kv_heads), elementwise ops replicated."""
    each = []
    for o in f.ops:
        t = o.time_s
        if o.kind != "elementwise" and tp > 1:
            # the op's own (shape-aware) time, scaled as the calibration scales its split share
            split = (o.act_bytes / tp + o.kv_bytes / min(tp, m.num_kv_heads) if o.kind == "attention"
                     else o.nbytes / tp)
            t *= cal.op_time_s(o.flops / tp, split, o.dtype) / cal.op_time_s(o.flops, o.nbytes, o.dtype)
        each.append(max(t - cal.launch_overhead_s, 0.0))
    return each


def tensor_parallel_prefill_s(model, gpu, prompt_tokens: int, tp: int, precision: Optional[Precision] = None,
                              calibration: Optional[Calibration] = None) -> float:
    """Time of one prompt's prefill split over `tp` GPUs of one server (tensor parallelism).

    Each GPU does 1/TP of every GEMM and attention head (elementwise ops are replicated),
    launches every kernel eagerly, and every layer ends in two all-reduces of the prompt's
    activations (prompt x hidden x activation bytes) over NVLink (R33).

    >>> from sim.forward import prefill_pass
    >>> tensor_parallel_prefill_s("llama-3.1-8b", "H100-SXM", 4096, 1) == prefill_pass(
    ...     "llama-3.1-8b", "H100-SXM", 4096).time_s
    True
    """
    check_int("prompt_tokens", prompt_tokens, minimum=1)
    check_int("tp", tp, minimum=1)
    m, g = resolve_model(model), resolve_gpu(gpu)
    if tp > m.num_heads:
        raise ValueError(f"tp ({tp}) must be <= the model's {m.num_heads} query heads")
    cal = calibration if calibration is not None else for_gpu(g)
    prec = precision or Precision()
    f = forward_pass(m, g, Batch.prefill(prompt_tokens, 1), prec, cal, cuda_graphs=False)
    if tp == 1:
        return f.time_s
    link = g.nvlink_bytes_per_s_per_direction or PCIE_GEN4_X16_BYTES_PER_S
    msg = prompt_tokens * m.hidden_size * bytes_per_elem(prec.act_dtype)
    compute = launched_step_time_s(_tp_busy_each_s(f, m, cal, tp), f.ops, m.num_layers,
                                   cal.launch_overhead_s, cuda_graphs=False)
    return compute + m.num_layers * 2 * _allreduce_s(cal, msg, tp, link)


@checked_params
@dataclass(frozen=True)
class ParallelParams:
    """Controls of the multi-GPU figure."""

    model: str = "llama-3.1-70b"
    gpu: str = "H100-SXM"
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    users: int = 16                     # sequences decoding together
    context_tokens: int = 8192          # tokens each user holds in the cache
    gpus_per_node: int = 8              # TP stays inside one server
    reserve_fraction: float = 0.10      # memory per GPU held back (activations, graphs): vLLM's 0.9 utilisation
    data_parallel: int = 1              # copies of the whole deployment
    max_gpus: int = 64
    cuda_graphs: bool = True

    def __post_init__(self) -> None:
        bytes_per_elem(self.weight_dtype)
        bytes_per_elem(self.kv_dtype)
        check_int("users", self.users, minimum=1)
        check_int("context_tokens", self.context_tokens, minimum=0)
        check_int("gpus_per_node", self.gpus_per_node, minimum=1)
        check_range("reserve_fraction", self.reserve_fraction, 0.0, 0.99)
        check_int("data_parallel", self.data_parallel, minimum=1)
        check_int("max_gpus", self.max_gpus, minimum=1)


@dataclass(frozen=True)
class ParallelLayout:
    """One TP x PP layout and what it costs."""

    tp: int
    pp: int
    gpus: int                           # tp x pp (one copy)
    weight_bytes_per_gpu: float
    kv_bytes_per_gpu: float
    reserve_bytes_per_gpu: float
    used_bytes_per_gpu: float
    fits: bool
    step_time_s: float                  # one decode step for all users
    comm_time_s: float                  # all-reduces and stage hand-offs in that step
    tokens_per_s_per_user: float
    tokens_per_s_total: float           # one copy


@dataclass(frozen=True)
class ParallelResult:
    """The chosen layout, the alternatives, and the memory picture."""

    model: str
    gpu: str
    weight_bytes: float                 # whole model at weight_dtype
    kv_bytes: float                     # all users' caches
    min_gpus_by_memory: int             # ceil((weights + KV) / usable memory per GPU)
    chosen: Optional[ParallelLayout]    # fewest GPUs that fit (then the largest TP); None if nothing fits
    gpus: int                           # chosen GPUs x data_parallel (0 if nothing fits)
    tokens_per_s_total: float           # chosen throughput x data_parallel
    candidates: list                    # [ParallelLayout] considered, by GPUs then TP
    candidate_gpus: np.ndarray          # (n,)
    candidate_tp: np.ndarray            # (n,)
    candidate_pp: np.ndarray            # (n,)
    candidate_used_bytes_per_gpu: np.ndarray  # (n,)
    candidate_fits: np.ndarray          # (n,) bool
    candidate_step_time_s: np.ndarray   # (n,)
    calibration_note: str


def plan_parallel(params: ParallelParams = ParallelParams(),
                  calibration: Optional[Calibration] = None) -> ParallelResult:
    """Choose TP x PP for a model, dtype, users and context on a GPU type; estimate decode speed.

    Layouts: TP = 1, 2, 4, ... up to a server's GPUs; PP > 1 only with a full server of TP.
    The chosen layout is the one with the fewest GPUs that fits, then the largest TP.
    Memory per GPU = weights / (TP x PP) + KV / (PP x min(TP, KV heads)) + reserve
    (KV heads are split by TP and replicated once TP exceeds them). Step time per GPU:
    every op's FLOPs and bytes split TP ways (elementwise ops replicated), summed over
    all layers (PP does not shorten one token's path), plus 2 all-reduces per layer and
    PP - 1 stage hand-offs.

    >>> r = plan_parallel()                  # Llama 3.1 70B, bf16, 16 users x 8K on H100
    >>> (r.chosen.tp, r.chosen.pp)
    (4, 1)
    """
    p = params
    m, g = resolve_model(p.model), resolve_gpu(p.gpu)
    cal = calibration if calibration is not None else for_gpu(g)
    prec = Precision(weight_dtype=p.weight_dtype, kv_dtype=p.kv_dtype)
    weights = stored_weight_bytes(m, prec)
    kv_total = 2.0 * m.num_layers * m.num_kv_heads * m.head_dim * p.context_tokens * p.users * bytes_per_elem(p.kv_dtype)
    reserve = p.reserve_fraction * g.memory_bytes
    usable = g.memory_bytes - reserve
    f = forward_pass(m, g, Batch.decode(p.users, p.context_tokens), prec, cal, p.cuda_graphs)
    link = g.nvlink_bytes_per_s_per_direction or PCIE_GEN4_X16_BYTES_PER_S
    msg = p.users * m.hidden_size * bytes_per_elem(prec.act_dtype)
    launch = cal.launch_overhead_s
    tps = [t for t in (2 ** i for i in range(int(math.log2(p.gpus_per_node)) + 1)) if t <= m.num_heads]
    layouts = []
    max_tp = tps[-1]
    for tp in tps:
        # PP only once TP fills a server: TP inside a node, PP across nodes (R34)
        for pp in range(1, (m.num_layers if tp == max_tp else 1) + 1):
            if tp * pp > p.max_gpus:
                break
            w_gpu = weights / (tp * pp)
            kv_gpu = kv_total / (pp * min(tp, m.num_kv_heads))
            used = w_gpu + kv_gpu + reserve
            each = _tp_busy_each_s(f, m, cal, tp)
            # one graph launch per stage, or the eager launch queue (launches hide behind longer kernels)
            compute = launched_step_time_s(each, f.ops, m.num_layers, launch * pp, p.cuda_graphs)
            comm = m.num_layers * 2 * _allreduce_s(cal, msg, tp, link) + (pp - 1) * (
                INTERNODE_LATENCY_S + msg / INTERNODE_BYTES_PER_S)
            step = compute + comm
            layouts.append(ParallelLayout(tp=tp, pp=pp, gpus=tp * pp, weight_bytes_per_gpu=w_gpu,
                                          kv_bytes_per_gpu=kv_gpu, reserve_bytes_per_gpu=reserve,
                                          used_bytes_per_gpu=used, fits=used <= g.memory_bytes, step_time_s=step,
                                          comm_time_s=comm, tokens_per_s_per_user=1.0 / step,
                                          tokens_per_s_total=p.users / step))
            if used <= g.memory_bytes:
                break              # more stages would only add hand-offs
    layouts.sort(key=lambda l: (l.gpus, -l.tp))
    fitting = [l for l in layouts if l.fits]
    chosen = fitting[0] if fitting else None
    return ParallelResult(
        model=m.display_name, gpu=g.display_name, weight_bytes=weights, kv_bytes=kv_total,
        min_gpus_by_memory=int(math.ceil((weights + kv_total) / usable)),
        chosen=chosen, gpus=(chosen.gpus * p.data_parallel) if chosen else 0,
        tokens_per_s_total=(chosen.tokens_per_s_total * p.data_parallel) if chosen else 0.0,
        candidates=layouts, candidate_gpus=np.array([l.gpus for l in layouts]),
        candidate_tp=np.array([l.tp for l in layouts]), candidate_pp=np.array([l.pp for l in layouts]),
        candidate_used_bytes_per_gpu=np.array([l.used_bytes_per_gpu for l in layouts]),
        candidate_fits=np.array([l.fits for l in layouts]),
        candidate_step_time_s=np.array([l.step_time_s for l in layouts]), calibration_note=cal.note)
